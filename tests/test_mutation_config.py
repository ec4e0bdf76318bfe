"""mutmut's configuration names every file of the package: what it does not mutate, it must copy.

mutmut runs the tests in ``mutants/``, a copy of the files its configuration names (``source_paths``,
mutated; ``also_copy``, as they are). A module added to the package and to neither list is missing
there, and every test that imports it fails in mutmut's stats run, before any mutant runs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "boundedgate"

# It reads the sources and pyproject.toml, not the build: the same on either build.
pytestmark = pytest.mark.build_independent


def test_mutmut_mutates_or_copies_every_file_of_the_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["mutmut"]
    named = [ROOT / path for path in config["source_paths"] + config["also_copy"]]
    files = [
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".so", ".pyd", ".c"}
    ]
    copied = [path for path in files if any(path == n or n in path.parents for n in named)]
    missing = sorted(str(path.relative_to(ROOT)) for path in files if path not in copied)
    assert missing == [], f"add these to [tool.mutmut] also_copy (or source_paths), pyproject.toml: {missing}"
