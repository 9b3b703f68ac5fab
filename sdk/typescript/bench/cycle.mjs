// `npm run bench`: the full job cycle through a server with the TypeScript SDK — enqueue in
// batches over the Producer stream, work with a no-op handler on a Worker, and count a job
// only when the server acknowledged its result (the completion committed). Prints one JSON
// object on stdout.
//
// Without --url a private `pgferry dev` is started ($PGFERRY_BIN, else `pgferry` on PATH)
// in a temporary directory and stopped afterwards. --compare-rust then runs
// `pgferry bench cycle --via grpc` (32 producers, 128 slots) in the same run and reports the
// ratio. Producers pause while more than --max-depth jobs wait (as the Rust bench does).
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, Worker } from "../dist/esm/index.js";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: process.env.PGFERRY_URL },
    "api-key": { type: "string", default: process.env.PGFERRY_API_KEY },
    jobs: { type: "string", default: "100000" },
    concurrency: { type: "string", default: "200" },
    batch: { type: "string", default: "500" },
    pipeline: { type: "string", default: "4" },
    "compare-rust": { type: "boolean", default: false },
    "rust-duration": { type: "string", default: "10" },
    preload: { type: "boolean", default: false },
    "max-depth": { type: "string", default: "20000" },
  },
});
const jobs = Number(a.jobs);
const concurrency = Number(a.concurrency);
const batch = Number(a.batch);
const pipeline = Number(a.pipeline);
// As the Rust bench's --max-depth: producers pause while more jobs than this wait.
const maxDepth = Number(a["max-depth"]);

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

async function run(url, key) {
  const queue = `bench_${Math.random().toString(36).slice(2, 10)}`;
  const client = new Client({ url, apiKey: key, timeoutMs: 120_000 });
  await client.enqueue("warmup", null, { queue: `${queue}_warmup` });
  const worker = new Worker({ url, apiKey: key, queues: [queue], concurrency, handleSignals: false, logger: { warn() {} } });
  worker.handle("noop", () => undefined);
  let enqueueEnd = 0;
  let t0 = performance.now();
  if (a.preload) await enqueueAll();
  const serving = worker.run();
  await worker.ready();
  const cpu0 = process.cpuUsage();
  t0 = performance.now();
  async function enqueueAll() {
    let next = 0;
    const lane = async () => {
      while (next < jobs) {
        while (!a.preload && next - worker.stats.acked > maxDepth) await new Promise((r) => setTimeout(r, 1));
        const n = Math.min(batch, jobs - next);
        next += n;
        await client.enqueueMany(Array.from({ length: n }, () => ({ kind: "noop", queue })));
      }
    };
    await Promise.all(Array.from({ length: pipeline }, lane));
    enqueueEnd = performance.now();
  }
  const done = new Promise((resolve) => {
    const t = setInterval(() => {
      if (worker.stats.acked >= jobs) {
        clearInterval(t);
        resolve();
      }
    }, 5);
  });
  await Promise.all([a.preload ? null : enqueueAll(), done]);
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  worker.stop();
  await serving;
  await client.close();
  return {
    bench: "typescript_cycle",
    jobs,
    concurrency,
    enqueue_batch: batch,
    pipeline,
    max_depth: a.preload ? null : maxDepth,
    completed_jobs_per_s: Math.round((jobs / elapsed) * 10) / 10,
    mode: a.preload ? "preload" : "cycle",
    ...(a.preload ? {} : { enqueue_jobs_per_s: Math.round((jobs / ((enqueueEnd - t0) / 1000)) * 10) / 10 }),
    elapsed_s: Math.round(elapsed * 1000) / 1000,
    cpu_us_per_job: Math.round(((cpu.user + cpu.system) / jobs) * 10) / 10,
    stale: worker.stats.stale,
    node: process.version,
  };
}

let dev = null;
let tmp = null;
let url = a.url;
let key = a["api-key"];
const bin = binary();
try {
  if (!url) {
    if (!bin) {
      console.error("bench: give --url/--api-key, or set PGFERRY_BIN");
      process.exit(2);
    }
    tmp = mkdtempSync(join(tmpdir(), "pgferry-tsbench-"));
    // As root, pgferry runs its Postgres as `postgres`, which must be able to enter it.
    chmodSync(tmp, 0o755);
    dev = await startDev(bin, tmp);
    url = dev.url;
    key = dev.key;
  }
  const report = await run(url, key);
  report.server = dev ? "pgferry dev (started by the bench)" : url;
  if (dev) {
    dev.proc.kill("SIGTERM");
    await new Promise((r) => dev.proc.once("exit", r));
    dev = null;
  }
  if (a["compare-rust"]) {
    if (!bin) throw new Error("--compare-rust needs PGFERRY_BIN or pgferry on PATH");
    const d = a["rust-duration"];
    const out = execFileSync(
      bin,
      ["bench", "cycle", "--via", "grpc", "--producers", "32", "--worker-slots", "128", "--json", "--duration", d, "--warmup", "2"],
      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], maxBuffer: 64 << 20 },
    );
    const rust = JSON.parse(out);
    report.rust_grpc_jobs_per_s = Math.round(Number(rust.jobs_per_s) * 10) / 10;
    report.ratio_typescript_to_rust_grpc = Math.round((report.completed_jobs_per_s / Number(rust.jobs_per_s)) * 1000) / 1000;
  }
  console.log(JSON.stringify(report));
} finally {
  if (dev) dev.proc.kill("SIGTERM");
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
