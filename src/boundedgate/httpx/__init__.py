"""The HTTP client edge: one gate under every request an httpx client sends (the LLM SDKs' too).

``GatedTransport(gate)`` is an httpx (or httpx2) transport: give it to the ``httpx.AsyncClient``
an SDK uses, and every request that client makes is admitted first, holds its slot until its
response body ends, and reports what the provider said. Importing ``boundedgate`` never imports
httpx; this subpackage uses the httpx module the requests come from.
"""

from ._call import Call, current_call, gate_call
from ._exchange import Exchange
from ._follow import follow_provider
from ._signals import ProviderSignal, Quota, parse_quotas, parse_retry_after, parse_signal
from ._transport import GatedTransport, refusal
from ._usage import total_tokens

__all__ = (
    "Call",
    "Exchange",
    "GatedTransport",
    "ProviderSignal",
    "Quota",
    "current_call",
    "follow_provider",
    "gate_call",
    "parse_quotas",
    "parse_retry_after",
    "parse_signal",
    "refusal",
    "total_tokens",
)

for _name in __all__:
    globals()[_name].__module__ = "boundedgate.httpx"
del _name
