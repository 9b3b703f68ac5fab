from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from server import Server  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One shared server for tests that do not restart it. Tests isolate themselves by
    using their own queue names."""
    s = Server(tmp_path_factory.mktemp("pgferry-shared"))
    s.start()
    yield s
    s.stop()


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name unique to the test."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    return ("q_" + name)[:60]
