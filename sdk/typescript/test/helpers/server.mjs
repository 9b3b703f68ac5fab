// Starts a real `pgferry dev` (embedded Postgres) for the integration tests.
//
// The binary is $PGFERRY_BIN, else <repo>/target/debug/pgferry (what `make test` builds).
// Addresses and the dev API key are read from the lines the server prints:
//     pgferry: listening grpc=http://ADDR
//     pgferry: listening http=http://ADDR
//     pgferry: dev api key=KEY
//
// Tests that take the database away from a running server use Postgres (a cluster of their
// own, stopped and started with pg_ctl) and Server.on(postgres) (`pgferry serve` on it).
import { execFile, execFileSync, spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, openSync, readdirSync, rmSync, writeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir, userInfo } from "node:os";
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
  constructor(dir, extraArgs = [], { databaseUrl = "", apiKey = "" } = {}) {
    this.dataDir = dir;
    this.extraArgs = extraArgs;
    this.proc = null;
    this.grpcUrl = "";
    this.httpUrl = "";
    this.apiKey = apiKey;
    // Set: `pgferry serve` on that database, with a key made beforehand (see on()).
    this.serveUrl = databaseUrl;
    this.logPath = join(dir, "server.log");
  }

  /** A `pgferry serve` on `pg` (not started), with an API key of a tenant of its own made
   * through the CLI (the migration first, so that the tenancy tables exist), and `extraArgs`
   * added to its command line (e.g. ["--rate-limit", "2"]). The server writes its log next
   * to the cluster. */
  static on(pg, extraArgs = []) {
    const url = pg.url();
    const run = (...args) => execFileSync(binary(), args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
    run("migrate", "up", "--database-url", url);
    run("tenant", "create", "acme", "--database-url", url);
    const { key } = JSON.parse(run("key", "create", "--tenant", "acme", "--database-url", url));
    return new Server(pg.dir, extraArgs, { databaseUrl: url, apiKey: key });
  }

  static async start(prefix) {
    const s = new Server(dataDir(prefix));
    await s.start();
    return s;
  }

  start() {
    const grpcAddr = this.grpcUrl.replace("http://", "") || "127.0.0.1:0";
    const httpAddr = this.httpUrl.replace("http://", "") || "127.0.0.1:0";
    const where = this.serveUrl ? ["serve", "--database-url", this.serveUrl] : ["dev", "--data-dir", this.dataDir];
    const args = [...where, "--http-addr", httpAddr, "--grpc-addr", grpcAddr, ...this.extraArgs];
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
        if (g && h && (k || this.serveUrl)) {
          clearTimeout(timer);
          proc.off("exit", onExit);
          this.grpcUrl = g[1];
          this.httpUrl = h[1];
          this.apiKey = k ? k[1] : this.apiKey;
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

/** $PGFERRY_PG_BINDIR, else the newest /usr/lib/postgresql/<major>/bin (Debian's packages). */
function pgBindir() {
  if (process.env.PGFERRY_PG_BINDIR) return process.env.PGFERRY_PG_BINDIR;
  const root = "/usr/lib/postgresql";
  const majors = existsSync(root) ? readdirSync(root).filter((d) => existsSync(join(root, d, "bin/postgres"))) : [];
  majors.sort((a, b) => Number(a) - Number(b));
  if (majors.length === 0) throw new Error(`no Postgres server binaries under ${root}/*/bin; set PGFERRY_PG_BINDIR`);
  return join(root, majors[majors.length - 1], "bin");
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** A private Postgres cluster that a test stops and starts (pg_ctl) while a server uses it:
 * the shared `pgferry dev` keeps its embedded cluster to itself. It keeps its port across
 * restarts, so the server's connection string stays valid. Postgres refuses to run as root:
 * then its programs run as the `postgres` user, as `pgferry dev` does. */
export class Postgres {
  static async create() {
    const pg = new Postgres(dataDir("pg"), await freePort());
    await pg.run("initdb", "-D", pg.pgdata, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync");
    return pg;
  }

  constructor(dir, port) {
    this.dir = dir;
    this.pgdata = join(dir, "pg");
    this.port = port;
    this.bindir = pgBindir();
    this.as = {};
    if (userInfo().uid === 0) {
      const id = (flag) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
      this.as = { uid: id("-u"), gid: id("-g") };
      chownSync(dir, this.as.uid, this.as.gid);
    }
  }

  run(program, ...args) {
    return new Promise((resolve, reject) => {
      execFile(join(this.bindir, program), args, { cwd: "/", timeout: 120_000, ...this.as }, (err, stdout, stderr) => {
        if (err) reject(new Error(`${program} ${args.join(" ")} failed: ${err.message}; ${stdout}${stderr}`));
        else resolve();
      });
    });
  }

  url() {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** Starts (again) on the same port, and waits until it accepts connections. */
  start() {
    const opts = `-p ${this.port} -k ${this.pgdata} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
    return this.run("pg_ctl", "-D", this.pgdata, "-l", join(this.dir, "postgres.log"), "-o", opts, "-w", "-t", "60", "start");
  }

  /** Fast shutdown: every session is ended at once (what a restart does to a server's
   * connections); resolves once Postgres is gone. */
  stop() {
    return this.run("pg_ctl", "-D", this.pgdata, "-m", "fast", "-w", "-t", "60", "stop");
  }

  async cleanup() {
    if (existsSync(join(this.pgdata, "postmaster.pid"))) {
      await this.run("pg_ctl", "-D", this.pgdata, "-m", "immediate", "-w", "stop").catch(() => {});
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
