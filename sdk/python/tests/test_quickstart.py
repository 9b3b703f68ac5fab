"""The README's Python quick start, run as pasted: its tasks.py under `pgferry-worker
tasks:app`, its enqueue.py printing exactly the output the README shows."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

from server import REPO, Server


def blocks(readme: str) -> dict[str, str]:
    """The fenced blocks of the Python quick start, by the file name written before them."""
    section = readme[readme.index("## Python quick start"):]
    section = section[: section.index("\n## ", 10)] if "\n## " in section[10:] else section
    out: dict[str, str] = {}
    for m in re.finditer(r"\(`(\w+\.py)`[^)]*\):\n\n```python\n(.*?)```", section, re.S):
        out[m.group(1)] = m.group(2)
    m = re.search(r"```sh\npython enqueue.py\n(.*?)```", section, re.S)
    assert m, "the README shows enqueue.py's output"
    out["expected"] = "".join(line.removeprefix("# ") + "\n" for line in m.group(1).splitlines())
    m = re.search(r"```sh\npgferry-worker workflow:app &.*?\npython workflow.py\n(.*?)```", section, re.S)
    assert m, "the README shows workflow.py's output"
    out["workflow_expected"] = "".join(line.removeprefix("# ") + "\n" for line in m.group(1).splitlines())
    return out


def test_readme_python_quick_start_runs_as_pasted(server: Server, tmp_path: pathlib.Path) -> None:
    code = blocks((REPO / "README.md").read_text())
    assert set(code) == {"tasks.py", "enqueue.py", "workflow.py", "expected", "workflow_expected"}
    (tmp_path / "tasks.py").write_text(code["tasks.py"])
    (tmp_path / "enqueue.py").write_text(code["enqueue.py"])
    env = dict(
        os.environ,
        PGFERRY_URL=server.grpc_url,
        PGFERRY_HTTP_URL=server.http_url,
        PGFERRY_API_KEY=server.api_key,
    )
    bindir = pathlib.Path(sys.executable).parent
    worker = subprocess.Popen(
        [str(bindir / "pgferry-worker"), "tasks:app", "--concurrency", "50"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        run = subprocess.run(
            [sys.executable, "enqueue.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == code["expected"], f"got:\n{run.stdout}\nREADME says:\n{code['expected']}"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "mail 'ada@example.com' about 'hi'" in out
    # The cron task was registered with the server's scheduler at startup.
    assert "task:report" in out


def test_readme_python_workflow_quick_start_runs_as_pasted(server: Server, tmp_path: pathlib.Path) -> None:
    code = blocks((REPO / "README.md").read_text())
    (tmp_path / "workflow.py").write_text(code["workflow.py"])
    env = dict(os.environ, PGFERRY_URL=server.grpc_url, PGFERRY_API_KEY=server.api_key)
    bindir = pathlib.Path(sys.executable).parent
    worker = subprocess.Popen(
        [str(bindir / "pgferry-worker"), "workflow:app"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        run = subprocess.run(
            [sys.executable, "workflow.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == code["workflow_expected"], f"got:\n{run.stdout}\nREADME says:\n{code['workflow_expected']}"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out


def test_quick_starts_pass_mypy_strict(tmp_path: pathlib.Path) -> None:
    """What a user copies from the README's quick start and docs/python.md type-checks
    under `mypy --strict` (the SDK promises typed handles; its own examples must hold)."""
    code = blocks((REPO / "README.md").read_text())
    files = []
    for name in ("tasks.py", "enqueue.py", "workflow.py"):
        (tmp_path / name).write_text(code[name])
        files.append(name)
    docs = (REPO / "docs" / "python.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", docs, re.S)
    assert len(snippets) >= 4, "docs/python.md's examples"
    for i, snippet in enumerate(snippets):
        (tmp_path / f"docs_python_{i}.py").write_text(snippet)
        files.append(f"docs_python_{i}.py")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".mypy_cache"), *files],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
