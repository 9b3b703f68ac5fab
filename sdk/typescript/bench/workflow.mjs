// `npm run bench:workflow`: workflow steps through a server with the TypeScript SDK — a
// 3-step state machine (`next`, `next`, `done`) and its code-first twin (three `ctx.step`s,
// replayed from the journal on every claim), each on its own queue, run by a WorkflowWorker
// over the gRPC stream. Instances are started first (WorkflowAdmin.Start, pipelined), so the
// producer is not what is measured; a step counts when the server acknowledged its outcome
// (committed). Prints one JSON object on stdout, progress on stderr.
//
// Without --url a private `pgferry dev` is started ($PGFERRY_BIN, else `pgferry` on PATH).
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Pgferry, Step } from "../dist/esm/index.js";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: process.env.PGFERRY_URL },
    "api-key": { type: "string", default: process.env.PGFERRY_API_KEY },
    instances: { type: "string", default: "5000" },
    concurrency: { type: "string", default: "200" },
    "start-pipeline": { type: "string", default: "64" },
    // Run the code-first case first (the second case runs on a warmer server).
    reverse: { type: "boolean", default: false },
  },
});
const instances = Number(a.instances);
const concurrency = Number(a.concurrency);
const startPipeline = Number(a["start-pipeline"]);

function binary() {
  if (process.env.PGFERRY_BIN) return process.env.PGFERRY_BIN;
  try {
    return execFileSync("sh", ["-c", "command -v pgferry"], { encoding: "utf8" }).trim() || null;
  } catch {
    return null;
  }
}

function startDev(bin, dir) {
  const proc = spawn(bin, ["dev", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "ignore"],
    detached: true,
  });
  return new Promise((resolve, reject) => {
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      const g = /pgferry: listening grpc=(\S+)/.exec(out);
      const k = /pgferry: dev api key=(\S+)/.exec(out);
      if (g && k) resolve({ proc, url: g[1], key: k[1] });
    });
    proc.on("exit", (code) => reject(new Error(`pgferry dev exited (${code}) before serving: ${out}`)));
  });
}

function progress(label, done, total) {
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r${label.padEnd(12)} [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${done}/${total}`);
  if (done >= total) process.stderr.write("\n");
}

async function measure(pg, label, def) {
  const queue = `bench_${label}_${Math.random().toString(36).slice(2, 8)}`;
  const wf = def(queue);
  let next = 0;
  const lane = async () => {
    while (next < instances) {
      const i = next++;
      await wf.start({ i });
      if (i % 500 === 0) progress(`start ${label}`, i, instances);
    }
  };
  await Promise.all(Array.from({ length: startPipeline }, lane));
  progress(`start ${label}`, instances, instances);
  const worker = pg.workflowWorker({ workflows: [wf], concurrency, handleSignals: false, logger: { warn() {} } });
  const serving = worker.run();
  await worker.ready();
  const steps = instances * 3;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await new Promise((resolve) => {
    const t = setInterval(() => {
      progress(`run ${label}`, Math.min(worker.stats.applied, steps), steps);
      if (worker.stats.applied >= steps) {
        clearInterval(t);
        resolve();
      }
    }, 100);
  });
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  worker.stop();
  await serving;
  return {
    steps_per_s: Math.round((steps / elapsed) * 10) / 10,
    instances_per_s: Math.round((instances / elapsed) * 10) / 10,
    elapsed_s: Math.round(elapsed * 1000) / 1000,
    cpu_us_per_step: Math.round(((cpu.user + cpu.system) / steps) * 10) / 10,
    stale: worker.stats.stale,
  };
}

let dev = null;
let tmp = null;
let url = a.url;
let key = a["api-key"];
try {
  if (!url) {
    const bin = binary();
    if (!bin) {
      console.error("bench: give --url/--api-key, or set PGFERRY_BIN");
      process.exit(2);
    }
    tmp = mkdtempSync(join(tmpdir(), "pgferry-tswfbench-"));
    chmodSync(tmp, 0o755);
    dev = await startDev(bin, tmp);
    url = dev.url;
    key = dev.key;
  }
  const pg = new Pgferry({ url, apiKey: key, timeoutMs: 120_000 });
  const cases = {
    machine: () =>
      measure(pg, "machine", (queue) =>
        pg.machine({
          name: "bench_machine_3",
          queue,
          steps: {
            start: (s) => Step.next("two", { a: s.input.i }),
            two: (s) => Step.next("three", { a: s.state.a, b: s.state.a + 1 }),
            three: (s) => Step.done(s.state.b + 1),
          },
        }),
      ),
    codeFirst: () =>
      measure(pg, "code_first", (queue) =>
        pg.workflow({
          name: "bench_code_3",
          queue,
          fn: async (ctx, input) => {
            const x = await ctx.step("one", () => input.i);
            const y = await ctx.step("two", () => x + 1);
            return ctx.step("three", () => y + 1);
          },
        }),
      ),
  };
  const order = a.reverse ? ["codeFirst", "machine"] : ["machine", "codeFirst"];
  const got = {};
  for (const k of order) got[k] = await cases[k]();
  const machine = got.machine;
  const codeFirst = got.codeFirst;
  await pg.close();
  console.log(
    JSON.stringify({
      bench: "typescript_workflow",
      instances,
      concurrency,
      order: order.join(","),
      machine_three_step: machine,
      code_first_three_step: codeFirst,
      ratio_code_first_to_machine: Math.round((codeFirst.steps_per_s / machine.steps_per_s) * 1000) / 1000,
      server: dev ? "pgferry dev (started by the bench)" : url,
      node: process.version,
    }),
  );
} finally {
  if (dev) {
    dev.proc.kill("SIGTERM");
    await new Promise((r) => dev.proc.once("exit", r));
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
