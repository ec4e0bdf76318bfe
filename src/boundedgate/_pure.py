"""``BOUNDEDGATE_NO_EXTENSIONS=1``: boundedgate's modules from their sources, even where compiled.

A wheel built with a C compiler holds the decision core and the permit compiled by mypyc beside
their sources (see ``hatch_build.py``); Python's own finder prefers the compiled module. With the
variable set (to anything but ``0``) before ``boundedgate`` is first imported, :func:`install`
puts a finder in front that loads every ``boundedgate`` module from its ``.py`` file instead, as
``AIOHTTP_NO_EXTENSIONS`` does for aiohttp. Never compiled itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ("install", "requested")


def requested() -> bool:
    """True when the environment asks for the pure-Python modules."""
    return os.environ.get("BOUNDEDGATE_NO_EXTENSIONS", "") not in ("", "0")


class SourceFinder(MetaPathFinder):
    """Finds ``boundedgate.*`` modules as their ``.py`` files; packages are left to the usual finder."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """The spec of the source file of ``fullname``, if it is a module of boundedgate."""
        if path is None or not fullname.startswith("boundedgate."):
            return None
        name = fullname.rpartition(".")[2]
        for entry in path:
            source = os.path.join(entry, name + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def install() -> None:
    """Put the :class:`SourceFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())
