"""What the compiled build's classes are marked with; never compiled itself.

The decision core (ticket, queue, state) and the driver's permit are compiled with mypyc when the
wheel is built with a C compiler (see ``hatch_build.py``). mypyc reads :func:`mypyc_attr` from the
type checker's view (``mypy_extensions``, a build-time dependency only); at run time it is a no-op
here, so neither build needs ``mypy_extensions`` installed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

__all__ = ("BoolArg", "FloatArg", "IntArg", "StrArg", "mypyc_attr", "restore_docstrings")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_attrs, **_settings):
        """The build's class marker; a no-op at run time."""
        return lambda cls: cls


# The types the entry points declare for the numbers and flags their callers pass, as the callers'
# type checkers read them. The compiled build reads them as `object`: hatch_build.py compiles against
# a copy of this module that says so (the lines below, exactly), because mypyc would otherwise check
# and convert such an argument itself (an int to a float, True to 1), or refuse it with a message of
# its own, before the library's check (``_settings.py``, shared by both builds) could refuse it with
# one that names it. A public method of a compiled class declares every argument a caller passes
# with one of these, or with a type mypyc does not check (a class of an interpreted module, a
# ``Mapping``), never a bare ``bool``, ``int``, ``float``, ``str`` or ``dict``.
BoolArg: TypeAlias = bool
FloatArg: TypeAlias = float
IntArg: TypeAlias = int
StrArg: TypeAlias = str


def restore_docstrings(*classes: type) -> None:
    """Give compiled classes back the docstrings of their source, which mypyc does not keep.

    The class's own, and its properties' (a compiled method keeps none, and takes none), and the
    ``__final__`` mark of ``@final``. Each class must come from a compiled module whose ``.py`` file
    is installed beside it, as both builds ship.
    """
    for cls in classes:
        source = Path(sys.modules[cls.__module__].__file__ or "").with_name(
            cls.__module__.rpartition(".")[2] + ".py"
        )
        tree = ast.parse(source.read_text(encoding="utf-8"))
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        cls.__doc__ = ast.get_docstring(node, clean=False)
        if any(isinstance(d, ast.Name) and d.id == "final" for d in node.decorator_list):
            cls.__final__ = True  # type: ignore[attr-defined]
        for item in node.body:
            member = vars(cls).get(getattr(item, "name", ""))
            if isinstance(item, ast.FunctionDef) and isinstance(member, property) and not member.__doc__:
                setattr(
                    cls, item.name, property(member.fget, member.fset, member.fdel, ast.get_docstring(item))
                )
