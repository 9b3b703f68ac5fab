// Small helpers shared by the integration tests.
import { setTimeout as sleep } from "node:timers/promises";

// Upper bound for any wait in a test: a bound on failure, never a speed assertion.
export const WAIT = 90_000;

/** Collects what handlers saw; waitUntil resolves once a predicate over it holds. */
export class Recorder {
  events = []; // { what, id, attempt, data }
  #waiters = [];
  add(what, ctx, data) {
    this.events.push({ what, id: ctx.id, attempt: ctx.attempt, data });
    for (const w of [...this.#waiters]) w();
  }
  ids(what) {
    return this.events.filter((e) => e.what === what).map((e) => e.id);
  }
  of(what, id) {
    return this.events.filter((e) => e.what === what && e.id === id);
  }
  waitUntil(pred, what = "condition", timeoutMs = WAIT) {
    if (pred()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (pred()) {
          done();
          resolve();
        }
      };
      const t = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; events: ${JSON.stringify(this.events.slice(-20))}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(t);
        this.#waiters = this.#waiters.filter((w) => w !== check);
      };
      this.#waiters.push(check);
    });
  }
}

/** Poll a predicate until it holds. */
export async function pollUntil(pred, what, timeoutMs = WAIT) {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** Run a worker in the background for the body; stop and drain it afterwards. */
export async function running(worker, body) {
  const run = worker.run();
  let failed = null;
  run.catch((e) => {
    failed = e;
  });
  await Promise.race([worker.ready(), run.then(() => Promise.reject(new Error("worker exited before it was ready")))]);
  try {
    return await body();
  } finally {
    worker.stop();
    await run.catch(() => {});
    if (failed) throw failed;
  }
}

/** Poll getJob until the job reaches one of `states`. */
export async function waitState(client, id, states, timeoutMs = WAIT) {
  const deadline = Date.now() + timeoutMs;
  let info = await client.getJob(id);
  while (!states.includes(info.state)) {
    if (Date.now() > deadline) throw new Error(`job ${id} stayed ${info.state}, wanted ${states}: ${JSON.stringify(info)}`);
    await sleep(100);
    info = await client.getJob(id);
  }
  return info;
}

/** Queue settings through the server's HTTP API (setup that does not depend on the SDK). */
export async function httpPatchQueue(server, queue, settings) {
  const r = await fetch(`${server.httpUrl}/v1/queues/${queue}`, {
    method: "PATCH",
    headers: { authorization: `Bearer ${server.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(settings),
  });
  if (!r.ok) throw new Error(`PATCH queue ${queue}: ${r.status} ${await r.text()}`);
  return r.json();
}

let n = 0;
/** A queue name unique to the test run (≤ 48 characters). */
export function queueName(t) {
  const base = String(t?.name ?? "q").toLowerCase().replace(/[^a-z0-9]+/g, "_").slice(0, 30).replace(/^_+|_+$/g, "");
  return `${base || "q"}_${process.pid % 10000}_${++n}`;
}

export const quiet = { warn() {} };
