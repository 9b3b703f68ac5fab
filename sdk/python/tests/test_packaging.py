"""Building the package leaves the source tree as it was: `pip install ./sdk/python` (a
wheel built in place) and an sdist write nothing next to the sources, and what they build
carries the compiled protocol modules."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

from server import REPO

SDK = REPO / "sdk" / "python"
# Not part of the source tree a user builds from: local environments and caches.
SKIP = {".venv", "__pycache__", ".mypy_cache", ".pytest_cache", "v1"}


def tree(root: pathlib.Path) -> dict[str, str]:
    """Every file under `root` (git-ignored ones too) with a hash of its content."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            p = pathlib.Path(dirpath, f)
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def copy_sources(dst: pathlib.Path) -> pathlib.Path:
    """sdk/python and the proto contract laid out as in the repository, without the
    developer's local state (venv, caches, modules an editable install generated)."""
    shutil.copytree(REPO / "proto", dst / "proto")
    shutil.copytree(SDK, dst / "sdk" / "python", ignore=lambda d, names: [n for n in names if n in SKIP])
    return dst / "sdk" / "python"


def run(*args: str, cwd: pathlib.Path) -> None:
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr}"


def test_building_wheel_and_sdist_leaves_the_source_tree_untouched(tmp_path: pathlib.Path) -> None:
    src = copy_sources(tmp_path / "repo")
    before = tree(tmp_path / "repo")
    dist = tmp_path / "dist"
    # What `pip install ./sdk/python` does first: build a wheel from the directory.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src), cwd=tmp_path)
    run(sys.executable, "-c", "from hatchling.build import build_sdist; build_sdist(%r)" % str(dist), cwd=src)
    after = tree(tmp_path / "repo")
    assert after == before, (
        f"the build wrote into the source tree: added {sorted(set(after) - set(before))}, "
        f"changed {sorted(k for k in before if after.get(k) != before[k])}"
    )

    (wheel,) = dist.glob("pgferry-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pgferry/v1/worker_pb2.py" in names and "pgferry/v1/worker_pb2.pyi" in names, names
    assert not [n for n in names if n.startswith("src/")], names

    # The sdist builds a wheel of its own away from the repository (its proto copy).
    (sdist,) = dist.glob("pgferry-*.tar.gz")
    with tarfile.open(sdist) as t:
        t.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    assert (unpacked / "proto" / "pgferry" / "v1" / "worker.proto").is_file()
    assert not (unpacked / "src" / "pgferry" / "v1").exists()
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist2"), str(unpacked), cwd=tmp_path)

    # Installed from the wheel alone (not this checkout's editable src/), it imports.
    site = tmp_path / "site"
    run(sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel), cwd=tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]]))
    r = subprocess.run(
        [sys.executable, "-S", "-c", "import pgferry, pgferry.v1.worker_pb2; print(pgferry.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(site)), r.stdout
