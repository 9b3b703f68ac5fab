"""Build hook: compile proto/pgferry/v1/*.proto into src/pgferry/v1 (messages + .pyi stubs).

The protocol contract lives at the repository root (../../proto). An sdist carries a copy
under ./proto. Generated files are written next to the sources so that editable installs
and wheels see the same modules; they are git-ignored.
"""

from __future__ import annotations

import pathlib
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def proto_root(here: pathlib.Path) -> pathlib.Path:
    for cand in (here / "proto", here.parent.parent / "proto"):
        if (cand / "pgferry" / "v1").is_dir():
            return cand
    raise RuntimeError(f"pgferry: cannot find proto/pgferry/v1 near {here}")


def generate(here: pathlib.Path) -> list[pathlib.Path]:
    from grpc_tools import protoc  # build-time dependency only
    import grpc_tools

    root = proto_root(here)
    out = here / "src"
    protos = sorted((root / "pgferry" / "v1").glob("*.proto"))
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
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
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        here = pathlib.Path(self.root)
        if self.target_name == "sdist":
            # Ship the contract with the sdist so it builds away from the repository.
            import shutil

            dst = here / "proto"
            src = proto_root(here)
            if src != dst:
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
        generate(here)


if __name__ == "__main__":  # `python hatch_build.py` regenerates in place
    for p in generate(pathlib.Path(__file__).resolve().parent):
        print(p)
