// Starts a real `pgferry dev` (embedded Postgres) for the integration tests.
//
// The binary is $PGFERRY_BIN, else <repo>/target/debug/pgferry (what `make test` builds).
// Addresses and the dev API key are read from the lines the server prints:
//     pgferry: listening grpc=http://ADDR
//     pgferry: listening http=http://ADDR
//     pgferry: dev api key=KEY
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const STARTUP_TIMEOUT_MS = 180_000;

export function binary() {
  const path = process.env.PGFERRY_BIN || join(REPO, "target/debug/pgferry");
  if (!existsSync(path)) {
    throw new Error(`pgferry binary not found at ${path}: run \`cargo build -p pgferry-cli\` or set PGFERRY_BIN`);
  }
  return path;
}

/** A fresh directory the embedded Postgres can enter (as root pgferry runs Postgres as the
 * `postgres` user, which cannot enter a 0700 directory). */
export function dataDir(prefix) {
  const d = mkdtempSync(join(tmpdir(), `pgferry-ts-${prefix}-`));
  chmodSync(d, 0o755);
  return d;
}

/** One `pgferry dev` process on its own data directory. restart() keeps the data and the
 * gRPC/HTTP ports, so connected clients see a server restart. */
export class Server {
  constructor(dir, extraArgs = []) {
    this.dataDir = dir;
    this.extraArgs = extraArgs;
    this.proc = null;
    this.grpcUrl = "";
    this.httpUrl = "";
    this.apiKey = "";
    this.logPath = join(dir, "server.log");
  }

  static async start(prefix) {
    const s = new Server(dataDir(prefix));
    await s.start();
    return s;
  }

  start() {
    const grpcAddr = this.grpcUrl.replace("http://", "") || "127.0.0.1:0";
    const httpAddr = this.httpUrl.replace("http://", "") || "127.0.0.1:0";
    const args = ["dev", "--data-dir", this.dataDir, "--http-addr", httpAddr, "--grpc-addr", grpcAddr, ...this.extraArgs];
    const log = openSync(this.logPath, "a");
    writeSync(log, `\n=== start: ${args.join(" ")}\n`);
    const proc = spawn(binary(), args, {
      stdio: ["ignore", "pipe", log],
      env: { PGFERRY_LOG: "info", ...process.env },
      detached: true,
    });
    this.proc = proc;
    return new Promise((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => {
        this.kill();
        reject(new Error(`pgferry dev did not print its addresses within ${STARTUP_TIMEOUT_MS} ms; stdout: ${out}; log: ${this.logPath}`));
      }, STARTUP_TIMEOUT_MS);
      const onExit = (code) => {
        clearTimeout(timer);
        reject(new Error(`pgferry dev exited with ${code} before serving; stdout: ${out}; log: ${this.logPath}`));
      };
      proc.on("exit", onExit);
      proc.stdout.on("data", (d) => {
        out += d;
        writeSync(log, String(d));
        const g = /pgferry: listening grpc=(\S+)/.exec(out);
        const h = /pgferry: listening http=(\S+)/.exec(out);
        const k = /pgferry: dev api key=(\S+)/.exec(out);
        const db = /pgferry: embedded postgres (\S+)/.exec(out);
        if (g && h && k) {
          clearTimeout(timer);
          proc.off("exit", onExit);
          this.grpcUrl = g[1];
          this.httpUrl = h[1];
          this.apiKey = k[1];
          // The embedded database (tests that use SQL directly: replay, transactions).
          this.databaseUrl = db ? db[1] : "";
          resolve(this);
        }
      });
    });
  }

  kill() {
    try {
      process.kill(-this.proc.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }

  /** SIGTERM (the server stops, then its Postgres); SIGKILL if it hangs. */
  async stop(timeoutMs = 60_000) {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    const t = setTimeout(() => this.kill(), timeoutMs);
    await exited;
    clearTimeout(t);
  }

  async restart() {
    await this.stop();
    await this.start();
  }

  async cleanup() {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
