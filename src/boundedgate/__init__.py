"""Admission control for asyncio in front of slow, limited, streamed calls (LLM SDKs above all).

At most C calls running, at most Q waiting, an immediate typed refusal beyond that, deadlines
measured from arrival, and permits that are released exactly once.
"""

from ._pure import install as _install_source_finder
from ._pure import requested as _pure_requested

if _pure_requested():  # BOUNDEDGATE_NO_EXTENSIONS=1: the sources, even where compiled modules are installed
    _install_source_finder()

from ._core import (
    COMPILED,
    OUTCOMES,
    SIGNALS,
    Adaptive,
    AdaptiveLimit,
    GateLimits,
    GateStatistics,
    KeyedStatistics,
    Outcome,
    RateLimit,
    RequestRecord,
    Status,
)
from ._downstream import downstream_refusals, downstream_refused
from ._driver import BoundedGate, CombinedPermit, KeyedGate, Permit, admit_all
from ._errors import (
    Evicted,
    GateError,
    GateUnavailable,
    Infeasible,
    Late,
    QueueExpired,
    QueueFull,
    RateLimited,
)
from ._streams import GatedStream, StreamOpener

__version__ = "0.1.0"

__all__ = (
    "COMPILED",
    "OUTCOMES",
    "SIGNALS",
    "Adaptive",
    "AdaptiveLimit",
    "BoundedGate",
    "CombinedPermit",
    "Evicted",
    "GateError",
    "GateLimits",
    "GateStatistics",
    "GateUnavailable",
    "GatedStream",
    "Infeasible",
    "KeyedGate",
    "KeyedStatistics",
    "Late",
    "Outcome",
    "Permit",
    "QueueExpired",
    "QueueFull",
    "RateLimit",
    "RateLimited",
    "RequestRecord",
    "Status",
    "StreamOpener",
    "admit_all",
    "downstream_refusals",
    "downstream_refused",
)

for _name in __all__:
    if _name not in ("COMPILED", "OUTCOMES", "SIGNALS"):  # the public constants: a bool, a tuple, a dict
        globals()[_name].__module__ = "boundedgate"
del _name
