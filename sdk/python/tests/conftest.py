from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from server import Server, data_dir  # noqa: E402

from pgferry.testing import pgferry_server  # noqa: E402,F401  (the fixture apps use)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One shared server for tests that do not restart it. Tests isolate themselves by
    using their own queue names."""
    s = Server(data_dir("shared"))
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name unique to the test."""
    import hashlib

    name = request.node.name.removeprefix("test_").replace("[", "_").replace("]", "").replace("-", "_")
    # Queue names are at most 48 characters (the server namespaces them by tenant).
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{name[:40]}_{digest}"
