"""Admission control for asyncio in front of slow, limited, streamed calls (LLM SDKs above all).

At most C calls running, at most Q waiting, an immediate typed refusal beyond that, deadlines
measured from arrival, and permits that are released exactly once.

Beside the names of ``__all__``, two attributes describe the installed package: ``__version__``,
and ``COMPILED``, True when the compiled build runs (see docs/performance.md, "The compiled build").
"""

from ._pure import install as _install_source_finder
from ._pure import requested as _pure_requested

if _pure_requested():  # BOUNDEDGATE_NO_EXTENSIONS=1: the sources, even where compiled modules are installed
    _install_source_finder()

from ._core import COMPILED as COMPILED  # build information, as __version__ is: not in __all__
from ._core import (
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
from ._driver import BoundedGate, CombinedPermit, KeyedGate, Permit, admit_all
from ._errors import (
    DeadlineCut,
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
    "OUTCOMES",
    "SIGNALS",
    "Adaptive",
    "AdaptiveLimit",
    "BoundedGate",
    "CombinedPermit",
    "DeadlineCut",
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
)

for _name in __all__:
    if _name not in ("OUTCOMES", "SIGNALS"):  # the public constants: a tuple and a dict
        globals()[_name].__module__ = "boundedgate"
del _name
