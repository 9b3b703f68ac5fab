"""Starts a real `pgferry dev` (embedded Postgres) for the integration tests.

The binary is $PGFERRY_BIN, else <repo>/target/debug/pgferry (what `make test` builds).
Addresses and the dev API key are read from the lines the server prints:
    pgferry: listening grpc=http://ADDR
    pgferry: dev api key=KEY

Tests that take the database away from a running server use `Postgres` (a cluster of
their own, stopped and started with pg_ctl) and `Server.on(postgres)` (`pgferry serve`
against it).
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import IO

REPO = pathlib.Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT = 180.0

_GRPC = re.compile(r"pgferry: listening grpc=(\S+)")
_HTTP = re.compile(r"pgferry: listening http=(\S+)")
_KEY = re.compile(r"pgferry: dev api key=(\S+)")


def data_dir(prefix: str) -> pathlib.Path:
    """A fresh directory the embedded Postgres can enter. As root, pgferry runs Postgres as
    the `postgres` user, which cannot enter pytest's 0700 tmp_path; so a world-traversable
    directory under the system temp dir (removed by Server.cleanup)."""
    import tempfile

    d = pathlib.Path(tempfile.mkdtemp(prefix=f"pgferry-{prefix}-"))
    d.chmod(0o755)
    return d


def binary() -> pathlib.Path:
    env = os.environ.get("PGFERRY_BIN")
    path = pathlib.Path(env) if env else REPO / "target" / "debug" / "pgferry"
    if not path.is_file():
        raise RuntimeError(
            f"pgferry binary not found at {path}: run `cargo build -p pgferry-cli` "
            "or set PGFERRY_BIN"
        )
    return path


class Server:
    """One `pgferry dev` process on its own data directory. `restart()` keeps the data and
    the gRPC/HTTP ports, so connected clients see a server restart."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        extra_args: list[str] | None = None,
        *,
        database_url: str = "",
        api_key: str = "",
    ) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args or []
        # Set: `pgferry serve` on that database, with a key made beforehand (see `on`).
        self.database_url = database_url
        self.proc: subprocess.Popen[str] | None = None
        self.grpc_url = ""
        self.http_url = ""
        self.api_key = api_key
        self.log_path = data_dir / "server.log"
        self._lines: list[str] = []
        self._cond = threading.Condition()

    def start(self) -> None:
        grpc_addr = self.grpc_url.removeprefix("http://") or "127.0.0.1:0"
        http_addr = self.http_url.removeprefix("http://") or "127.0.0.1:0"
        where = ["serve", "--database-url", self.database_url] if self.database_url else [
            "dev", "--data-dir", str(self.data_dir)
        ]
        args = [
            str(binary()),
            *where,
            "--http-addr",
            http_addr,
            "--grpc-addr",
            grpc_addr,
            *self.extra_args,
        ]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")
        log.write(f"\n=== start: {' '.join(args)}\n")
        log.flush()
        env = dict(os.environ)
        env.setdefault("PGFERRY_LOG", "info")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
        )
        with self._cond:
            self._lines = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, log), daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with self._cond:
            while True:
                text = "\n".join(self._lines)
                g, k = _GRPC.search(text), _KEY.search(text)
                if g and (k or self.database_url):
                    self.grpc_url = g.group(1)
                    self.api_key = k.group(1) if k else self.api_key
                    h = _HTTP.search(text)
                    self.http_url = h.group(1) if h else self.http_url
                    return
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"pgferry dev exited with {self.proc.returncode} before serving; "
                        f"stdout: {text!r}; log: {self.log_path}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stop()
                    raise RuntimeError(
                        f"pgferry dev did not print its grpc address and dev api key within "
                        f"{STARTUP_TIMEOUT}s; stdout so far: {text!r}; log: {self.log_path}"
                    )
                self._cond.wait(min(left, 0.5))

    def _pump(self, out: IO[str] | None, log: IO[str]) -> None:
        assert out is not None
        for line in out:
            log.write(line)
            log.flush()
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the server stops, then its Postgres); SIGKILL if it hangs."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            raise RuntimeError(f"pgferry dev ignored SIGTERM for {timeout}s (log: {self.log_path})")

    def cleanup(self) -> None:
        import shutil

        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    @classmethod
    def on(cls, pg: Postgres) -> Server:
        """A `pgferry serve` on `pg` (not started), with an API key of a tenant of its own
        made through the CLI (the migration first, so that the tenancy tables exist). The
        server writes its log next to the cluster."""
        url = pg.url()
        run = [str(binary())]
        subprocess.run([*run, "migrate", "up", "--database-url", url], check=True, capture_output=True, timeout=120)
        subprocess.run([*run, "tenant", "create", "acme", "--database-url", url], check=True, capture_output=True, timeout=60)
        out = subprocess.run(
            [*run, "key", "create", "--tenant", "acme", "--database-url", url],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout
        key: str = json.loads(out)["key"]
        return cls(pg.dir, database_url=url, api_key=key)


def _pg_bindir() -> pathlib.Path:
    """$PGFERRY_PG_BINDIR, else the newest /usr/lib/postgresql/*/bin (Debian's packages)."""
    env = os.environ.get("PGFERRY_PG_BINDIR")
    if env:
        return pathlib.Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    if not found:
        raise RuntimeError("no Postgres server binaries under /usr/lib/postgresql/*/bin; set PGFERRY_PG_BINDIR")
    return pathlib.Path(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Postgres:
    """A private Postgres cluster that a test stops and starts (pg_ctl) while a server uses
    it: the shared `pgferry dev` keeps its embedded cluster to itself. It keeps its port
    across restarts, so the server's connection string stays valid. Postgres refuses to run
    as root: then its programs run as the `postgres` user (through runuser, not
    subprocess's user=: that forks instead of vfork, and a fork of a process whose gRPC
    threads are busy can crash before the exec), as `pgferry dev` does."""

    def __init__(self) -> None:
        self.dir = data_dir("pg")
        self.pgdata = self.dir / "pg"
        self.port = _free_port()
        self.bindir = _pg_bindir()
        self._as: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-sync")

    def _run(self, program: str, *args: str) -> None:
        out = subprocess.run([*self._as, str(self.bindir / program), *args], cwd="/",
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed ({out.returncode}): {out.stdout}{out.stderr}")

    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Starts (again) on the same port, and waits until it accepts connections."""
        opts = (f"-p {self.port} -k {self.pgdata} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.dir / "postgres.log"), "-o", opts,
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Fast shutdown: every session is ended at once (what a restart does to a server's
        connections); returns once Postgres is gone."""
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "60", "stop")

    def cleanup(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")
            except RuntimeError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
