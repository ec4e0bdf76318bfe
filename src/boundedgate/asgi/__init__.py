"""The HTTP server edge: a pure ASGI gate in front of an app, and its per-route forms.

``pip install 'boundedgate[asgi]'``. :class:`GateMiddleware`, the refusals and the limits document
need nothing but the standard library; the FastAPI / Starlette helpers (:func:`gate_dependency`,
:class:`GatedStreamingResponse`, :func:`refusal_handler`, :func:`provider_error_handler`) import
Starlette when first used. Nothing here imports an LLM SDK: the provider's refusals are read from
the exceptions' ``status_code`` and ``response.headers``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._limits import limits_app, limits_document
from ._middleware import UNGATED, GateMiddleware
from ._refusal import Refusal, RefusalStyle, provider_refusal, refusal_for

if TYPE_CHECKING:
    from ._starlette import GatedStreamingResponse, gate_dependency, provider_error_handler, refusal_handler

__all__ = (
    "UNGATED",
    "GateMiddleware",
    "GatedStreamingResponse",
    "Refusal",
    "RefusalStyle",
    "gate_dependency",
    "limits_app",
    "limits_document",
    "provider_error_handler",
    "provider_refusal",
    "refusal_for",
    "refusal_handler",
)

_LAZY = frozenset(("GatedStreamingResponse", "gate_dependency", "provider_error_handler", "refusal_handler"))

for _name in (
    "GateMiddleware",
    "Refusal",
    "limits_app",
    "limits_document",
    "provider_refusal",
    "refusal_for",
):
    globals()[_name].__module__ = __name__
type(UNGATED).__module__ = __name__
del _name


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # Starlette is imported here, on first use, not with the package.
        value = getattr(importlib.import_module("._starlette", __name__), name)
        value.__module__ = __name__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
