"""anyio's cancel scopes, consulted only in a process where one can exist.

anyio loads its asyncio backend (``anyio._backends._asyncio``: some thirty modules, tens of
milliseconds) the first time anything asks it for a cancel scope or a deadline, so a gate that
asked anyio on its first stream or its first cancelled caller would make that request pay for the
import. It need not ask: every anyio cancel scope on an asyncio loop is an object of that backend,
so in a process that has not loaded it there is no anyio scope to shield from or to ask about.
Whatever runs anyio's scopes (``anyio.run``, anyio's pytest plugin, httpx's connection pool, a
Starlette app) has loaded the backend before any of them exists, and from then on the gate asks.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType

__all__ = ("anyio_in_use", "shield_from_anyio")

#: The module every anyio cancel scope on an asyncio loop comes from.
_ASYNCIO_BACKEND = "anyio._backends._asyncio"


def anyio_in_use() -> ModuleType | None:
    """anyio, when its asyncio backend is loaded (an anyio cancel scope can exist); else None."""
    return sys.modules.get("anyio") if _ASYNCIO_BACKEND in sys.modules else None


def shield_from_anyio() -> contextlib.AbstractContextManager[object]:
    """A shielded anyio cancel scope, where anyio's scopes are in use; else a context that does nothing.

    Inside it, a cancelled anyio scope around the task does not cancel it again at every loop turn.
    """
    anyio = anyio_in_use()
    if anyio is None:
        return contextlib.nullcontext()
    scope: contextlib.AbstractContextManager[object] = anyio.CancelScope(shield=True)
    return scope
