// The CommonJS build loads with require() and works like the ESM one.
const assert = require("node:assert/strict");
const { it } = require("node:test");

it("require('pgferry') gives the CJS build with the same exports", async () => {
  const cjs = require("pgferry");
  assert.equal(typeof cjs.Pgferry, "function");
  assert.equal(typeof cjs.Worker, "function");
  assert.ok(require.resolve("pgferry").endsWith("dist/cjs/index.js"));
  const esm = await import("pgferry");
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).filter((k) => k !== "default").sort());
  // The CJS build is self-contained: the protocol descriptor is compiled in.
  const c = new cjs.Client({ url: "http://127.0.0.1:9", apiKey: "k", connectTimeoutMs: 300 });
  await assert.rejects(c.enqueue("x", {}), cjs.Unavailable);
  await c.close();
});
