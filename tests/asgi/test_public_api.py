"""boundedgate.asgi's public surface: exported once, documented, and named after the package."""

from __future__ import annotations

import inspect

import boundedgate.asgi


def test_every_public_name_is_documented_and_lives_in_boundedgate_asgi() -> None:
    assert isinstance(boundedgate.asgi.__all__, tuple)
    for name in boundedgate.asgi.__all__:
        obj = getattr(boundedgate.asgi, name)
        if name == "RefusalStyle":
            continue  # the Literal type of the styles' names
        assert obj.__module__ == "boundedgate.asgi", name
        assert inspect.getdoc(obj), name
        for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
            if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            assert inspect.getdoc(member), f"{name}.{attr}"
