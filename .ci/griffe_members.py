"""A griffe extension for the reference site: ``BoundedGate`` and ``KeyedGate`` show their base's members.

The gate's slots and methods are declared by ``GateBase`` (``_driver/_gate.py``, compiled with mypyc
where the build compiles), of which the public ``BoundedGate`` (``_driver/_bounded.py``) is the one
subclass, adding only its weak-reference slot and the constructor. The reference
documents the public class as if it declared them, as it did before the split, without rendering
every class's inherited members (the errors' ``GateError`` fields, say), and without its base. The
compiled modules' argument types (``FloatArg``, ``IntArg``, ``StrArg``, ``BoolArg``: the plain
types for a type checker, see ``_core/_native.py``) read as those plain types, and the permit's
gate (typed ``GateBase``, so that the compiled permit reads it natively) as ``BoundedGate``. The
same for ``KeyedGate`` (``_driver/_keyed.py``) and its compiled base ``KeyedBase``
(``_driver/_keys.py``), which declares ``admit()``: the keyed gate's own declaration of it, for
a type checker alone (its key a ``K``), takes the base's docstring.
"""

from __future__ import annotations

from typing import Any

import griffe

#: What the compiled modules' argument types are to a type checker.
PLAIN = {"BoolArg": "bool", "FloatArg": "float", "IntArg": "int", "StrArg": "str", "GateBase": "BoundedGate"}


class GateMembers(griffe.Extension):
    """Give ``BoundedGate`` and ``KeyedGate`` their base's members, as their own."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Once ``boundedgate`` is loaded: alias each member of each base in its public class."""
        if pkg.name != "boundedgate":
            return
        for public, hidden in (
            ("_driver._bounded.BoundedGate", "_driver._gate.GateBase"),
            ("_driver._keyed.KeyedGate", "_driver._keys.KeyedBase"),
        ):
            cls, base = pkg[public], pkg[hidden]
            for name, member in base.members.items():
                own = cls.members.get(name)
                if own is None:
                    cls.set_member(name, griffe.Alias(name, member, parent=cls))
                elif own.docstring is None and member.docstring is not None:
                    own.docstring = griffe.Docstring(member.docstring.value, parent=own)
            # shown as before: a class of its own (the keyed gate, generic in its keys)
            cls.bases = [b for b in cls.bases if str(b).startswith("Generic")]
            for owner in (base, cls):
                for member in owner.members.values():
                    if isinstance(member, griffe.Function):
                        for parameter in member.parameters:
                            _plain(parameter.annotation)
        for member in pkg["_driver._gate.Permit"].members.values():
            if isinstance(member, griffe.Function):
                for parameter in member.parameters:
                    _plain(parameter.annotation)


def _plain(annotation: str | griffe.Expr | None) -> None:
    if isinstance(annotation, griffe.Expr):
        for part in annotation.iterate(flat=True):
            if isinstance(part, griffe.ExprName) and part.name in PLAIN:
                part.name = PLAIN[part.name]
