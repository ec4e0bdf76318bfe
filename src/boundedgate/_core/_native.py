"""What the compiled build's classes are marked with; never compiled itself.

The decision core and the driver's gate and permit are compiled with mypyc when the wheel is built
with a C compiler (see ``hatch_build.py``). mypyc reads :func:`mypyc_attr` from the type checker's
view (``mypy_extensions``, a build-time dependency only); at run time it is a no-op here, so neither
build needs ``mypy_extensions`` installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

__all__ = ("FloatArg", "IntArg", "mypyc_attr")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_attrs, **_settings):
        """The build's class marker; a no-op at run time."""
        return lambda cls: cls


# The types the entry points declare for the numbers their callers pass, as the callers' type
# checkers read them. The compiled build reads both as `object`: hatch_build.py compiles against a
# copy of this module that says so (the lines below, exactly), because mypyc would otherwise check
# and convert such an argument itself (an int to a float, True to 1) before the library's own check
# could refuse it with a message that names it.
FloatArg: TypeAlias = float
IntArg: TypeAlias = int
