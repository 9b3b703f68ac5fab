"""Testing helpers for applications built on pgferry.

Unit tests, no server: run tasks in-process as they are enqueued.

    def test_signup(app):            # your fixture
        with app.eager() as store:
            job = signup.enqueue_sync("a@example.com")
            assert job.result_sync() == "welcome sent"

Integration tests against a real server: a pytest fixture that starts `pgferry dev` (its
own embedded Postgres in a temporary directory) once per session.

    # conftest.py
    pytest_plugins = ["pgferry.testing"]

    def test_roundtrip(pgferry_server):
        app = pgferry.App(pgferry_server.grpc_url, pgferry_server.api_key,
                          http_url=pgferry_server.http_url)

The binary is $PGFERRY_BIN, else `pgferry` on PATH."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import IO

_GRPC = re.compile(r"pgferry: listening grpc=(\S+)")
_HTTP = re.compile(r"pgferry: listening http=(\S+)")
_KEY = re.compile(r"pgferry: dev api key=(\S+)")


class DevServer:
    """A `pgferry dev` process on a temporary data directory, on free loopback ports.

    `grpc_url`, `http_url` and `api_key` are known once `start()` returns; `env()` gives
    them as the PGFERRY_* variables pgferry.App reads."""

    def __init__(self, binary: str | None = None, startup_timeout: float = 180.0) -> None:
        self.binary = binary or os.environ.get("PGFERRY_BIN") or shutil.which("pgferry") or ""
        if not self.binary:
            raise RuntimeError("pgferry.testing: set PGFERRY_BIN or put `pgferry` on PATH")
        self.startup_timeout = startup_timeout
        self.grpc_url = ""
        self.http_url = ""
        self.api_key = ""
        self.data_dir: pathlib.Path | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._cond = threading.Condition()

    def start(self) -> DevServer:
        # As root, pgferry runs its Postgres as `postgres`, which must be able to enter it.
        self.data_dir = pathlib.Path(tempfile.mkdtemp(prefix="pgferry-testing-"))
        self.data_dir.chmod(0o755)
        self.proc = subprocess.Popen(
            [self.binary, "dev", "--data-dir", str(self.data_dir),
             "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout
        with self._cond:
            while True:
                text = "\n".join(self._lines)
                g, h, k = _GRPC.search(text), _HTTP.search(text), _KEY.search(text)
                if g and h and k:
                    self.grpc_url, self.http_url, self.api_key = g.group(1), h.group(1), k.group(1)
                    return self
                if self.proc.poll() is not None:
                    raise RuntimeError(f"pgferry dev exited with {self.proc.returncode}: {text!r}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgferry dev did not start within {self.startup_timeout}s: {text!r}")
                self._cond.wait(0.5)

    def _pump(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def env(self) -> dict[str, str]:
        return {
            "PGFERRY_URL": self.grpc_url,
            "PGFERRY_HTTP_URL": self.http_url,
            "PGFERRY_API_KEY": self.api_key,
        }

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers above work without pytest
    pass
else:

    @pytest.fixture(scope="session")
    def pgferry_server() -> Iterator[DevServer]:
        """A real `pgferry dev` for the whole test session (stopped and removed after)."""
        with DevServer() as server:
            yield server


__all__ = ["DevServer", "pgferry_server"]
