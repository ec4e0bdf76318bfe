"""A griffe extension for the reference site: ``BoundedGate`` shows the members its base declares.

The gate's slots and methods are declared by ``GateBase`` (``_driver/_gate.py``, compiled with mypyc
where the build compiles), of which the public ``BoundedGate`` (``_driver/_bounded.py``) is the one
subclass, adding only its weak-reference slot, the constructor and ``_around()``. The reference
documents the public class as if it declared them, as it did before the split, without rendering
every class's inherited members (the errors' ``GateError`` fields, say), and without its base. The
compiled modules' argument types (``FloatArg``, ``IntArg``, ``StrArg``, ``BoolArg``: the plain
types for a type checker, see ``_core/_native.py``) read as those plain types, and the permit's
gate (typed ``GateBase``, so that the compiled permit reads it natively) as ``BoundedGate``.
"""

from __future__ import annotations

from typing import Any

import griffe

#: What the compiled modules' argument types are to a type checker.
PLAIN = {"BoolArg": "bool", "FloatArg": "float", "IntArg": "int", "StrArg": "str", "GateBase": "BoundedGate"}


class GateMembers(griffe.Extension):
    """Give ``BoundedGate`` its base's members, as its own."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Once ``boundedgate`` is loaded: alias each member of ``GateBase`` in ``BoundedGate``."""
        if pkg.name != "boundedgate":
            return
        gate = pkg["_driver._bounded.BoundedGate"]
        base = pkg["_driver._gate.GateBase"]
        for name, member in base.members.items():
            if name not in gate.members:
                gate.set_member(name, griffe.Alias(name, member, parent=gate))
        gate.bases = []  # shown as before: a class of its own
        for cls in (base, pkg["_driver._permit.Permit"]):
            for member in cls.members.values():
                if isinstance(member, griffe.Function):
                    for parameter in member.parameters:
                        _plain(parameter.annotation)


def _plain(annotation: str | griffe.Expr | None) -> None:
    if isinstance(annotation, griffe.Expr):
        for part in annotation.iterate(flat=True):
            if isinstance(part, griffe.ExprName) and part.name in PLAIN:
                part.name = PLAIN[part.name]
