"""A refusal as the HTTP response an SDK understands: its status error, raised at once, no retry."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from .._errors import GateError

__all__ = ("Envelope", "refusal_body", "refusal_headers")

Envelope = Literal["auto", "openai", "anthropic"]

#: ``response.extensions[REFUSAL]`` is the :class:`~boundedgate.GateError` a synthesised response stands for.
REFUSAL = "boundedgate.refusal"


def envelope_for(envelope: Envelope, host: str, headers: Any) -> Literal["openai", "anthropic"]:
    """The error envelope to answer a request with: Anthropic's for its API, else OpenAI's.

    ``"auto"`` picks Anthropic's when the request carries ``anthropic-version`` (every Anthropic
    SDK request does) or goes to ``*.anthropic.com``.
    """
    if envelope != "auto":
        return envelope
    if "anthropic-version" in headers or host.endswith("anthropic.com"):
        return "anthropic"
    return "openai"


def refusal_body(error: GateError, envelope: Literal["openai", "anthropic"]) -> bytes:
    """The JSON body: the provider's error shape, with the gate's own record under ``"boundedgate"``.

    The provider's ``error`` object comes first and is never merged with ``error.to_dict()``
    (whose top-level ``"error"`` is a message string): openai's ``e.code`` and anthropic's
    ``e.body["error"]["type"]`` read the gate's code.
    """
    message = str(error)
    if envelope == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": error.code, "message": message}}
    else:
        body = {"error": {"message": message, "type": error.code, "code": error.code, "param": None}}
    body["boundedgate"] = error.to_dict()
    return json.dumps(body).encode()


def refusal_headers(error: GateError, sdk_retry: bool, default_retry_after: float) -> dict[str, str]:
    """``Retry-After`` (whole seconds) and ``retry-after-ms``, ``x-should-retry``, the code, the type.

    ``x-should-retry: false`` makes both SDKs raise the status error at once; ``true`` makes them
    sleep the ``retry-after-ms`` and try again, each retry a new admission (openai honours a
    wait of at most 120 s and does not retry past that; anthropic honours any).
    """
    retry_after = error.retry_after
    if retry_after is None or not math.isfinite(retry_after):
        retry_after = default_retry_after
    return {
        "content-type": "application/json",
        "retry-after": str(max(1, math.ceil(retry_after))),
        "retry-after-ms": str(max(1, math.ceil(retry_after * 1000))),
        "x-should-retry": "true" if sdk_retry else "false",
        "x-boundedgate": error.code,
    }
