// A queue's retention of ended workflow instances through the SDK against a real server,
// over gRPC (WorkflowAdmin) and over HTTP (a client with only the HTTP address): read, set,
// clear, and bad values refused with the field named and the setting left as it was.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, InvalidArgument } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { queueName } from "./helpers/util.mjs";

const TEN_YEARS_MS = 315_360_000_000;

let server;
before(async () => {
  server = await Server.start("wf-retention");
});
after(async () => {
  await server?.cleanup();
});

async function roundTrip(client, queue) {
  const wf = client.workflows;
  assert.equal(await wf.getRetention(queue), null, "a new queue has no setting");
  assert.equal(await wf.setRetention(86_400_123, { queue }), 86_400_123);
  assert.equal(await wf.getRetention(queue), 86_400_123);
  assert.equal(await wf.getRetention(`${queue}_other`), null, "another queue is not touched");
  // Over ten years: refused by the server, naming the field; the setting stays.
  await assert.rejects(wf.setRetention(TEN_YEARS_MS + 1, { queue }), (e) => e instanceof InvalidArgument && e.field === "retention_ms");
  // Negative or fractional: refused before anything is sent.
  for (const bad of [-1, 1.5, Number.NaN]) {
    await assert.rejects(wf.setRetention(bad, { queue }), (e) => e instanceof InvalidArgument && e.field === "retentionMs");
  }
  assert.equal(await wf.getRetention(queue), 86_400_123);
  await assert.rejects(wf.getRetention("bad name!"), InvalidArgument);
  // 0 keeps nothing past the end; null clears the queue's own setting.
  assert.equal(await wf.setRetention(0, { queue }), 0);
  assert.equal(await wf.getRetention(queue), 0);
  assert.equal(await wf.setRetention(null, { queue }), null);
  assert.equal(await wf.getRetention(queue), null);
}

describe("workflow retention", () => {
  for (const [via, opts] of [
    ["gRPC", () => ({ url: server.grpcUrl })],
    ["HTTP", () => ({ httpUrl: server.httpUrl })],
  ]) {
    it(`reads, sets and clears over ${via}`, async (t) => {
      const client = new Client({ ...opts(), apiKey: server.apiKey });
      try {
        await roundTrip(client, queueName(t));
      } finally {
        await client.close();
      }
    });
  }

  it("uses the client's default queue", async (t) => {
    const queue = queueName(t);
    const client = new Client({ url: server.grpcUrl, apiKey: server.apiKey, defaultQueue: queue });
    try {
      assert.equal(await client.workflows.setRetention(60_000), 60_000);
      assert.equal(await client.workflows.getRetention(queue), 60_000);
      assert.equal(await client.workflows.getRetention(), 60_000);
    } finally {
      await client.close();
    }
  });
});
