"""Build hook: compile proto/pgferry/v1/*.proto into the package's pgferry/v1 (messages +
.pyi stubs).

The protocol contract lives at the repository root (../../proto); an sdist carries a copy
under ./proto. A wheel or sdist build leaves the source tree as it found it: the modules
are generated into a temporary directory and put into the archive from there (as is the
proto copy of an sdist), so `pip install ./sdk/python` writes nothing next to the sources.
Only an editable install (`pip install -e`), which runs the package from src/, generates
into src/pgferry/v1 (git-ignored).
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def proto_root(here: pathlib.Path) -> pathlib.Path:
    for cand in (here / "proto", here.parent.parent / "proto"):
        if (cand / "pgferry" / "v1").is_dir():
            return cand
    raise RuntimeError(f"pgferry: cannot find proto/pgferry/v1 near {here}")


def generate(here: pathlib.Path, out: pathlib.Path) -> list[pathlib.Path]:
    """Compiles the protos of the tree at `here` into `out`/pgferry/v1; returns the files."""
    from grpc_tools import protoc  # build-time dependency only
    import grpc_tools

    root = proto_root(here)
    protos = sorted((root / "pgferry" / "v1").glob("*.proto"))
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("pgferry: protoc failed on " + " ".join(map(str, protos)))
    pkg = out / "pgferry" / "v1"
    init = pkg / "__init__.py"
    init.write_text('"""Generated from proto/pgferry/v1 by hatch_build.py; do not edit."""\n')
    return sorted(pkg.glob("*.py")) + sorted(pkg.glob("*.pyi"))


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    _scratch: pathlib.Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        here = pathlib.Path(self.root)
        if self.target_name == "wheel" and version == "editable":
            # The editable install imports pgferry from src/: the modules must be there.
            generate(here, here / "src")
            return
        force = build_data.setdefault("force_include", {})
        if self.target_name == "sdist":
            # Ship the contract with the sdist so it builds away from the repository; the
            # wheel built from it compiles it.
            if proto_root(here) != here / "proto":
                force[str(proto_root(here))] = "proto"
            return
        self._scratch = pathlib.Path(tempfile.mkdtemp(prefix="pgferry-build-"))
        for f in generate(here, self._scratch):
            force[str(f)] = f"pgferry/v1/{f.name}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


if __name__ == "__main__":  # `python hatch_build.py` regenerates src/pgferry/v1 in place
    here = pathlib.Path(__file__).resolve().parent
    for p in generate(here, here / "src"):
        print(p)
