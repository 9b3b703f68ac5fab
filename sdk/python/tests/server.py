"""Starts a real `pgferry dev` (embedded Postgres) for the integration tests.

The binary is $PGFERRY_BIN, else <repo>/target/debug/pgferry (what `make test` builds).
Addresses and the dev API key are read from the lines the server prints:
    pgferry: listening grpc=http://ADDR
    pgferry: dev api key=KEY
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
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

    def __init__(self, data_dir: pathlib.Path, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[str] | None = None
        self.grpc_url = ""
        self.http_url = ""
        self.api_key = ""
        self.log_path = data_dir / "server.log"
        self._lines: list[str] = []
        self._cond = threading.Condition()

    def start(self) -> None:
        grpc_addr = self.grpc_url.removeprefix("http://") or "127.0.0.1:0"
        http_addr = self.http_url.removeprefix("http://") or "127.0.0.1:0"
        args = [
            str(binary()),
            "dev",
            "--data-dir",
            str(self.data_dir),
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
                if g and k:
                    self.grpc_url = g.group(1)
                    self.api_key = k.group(1)
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
