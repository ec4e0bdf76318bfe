"""Admission control for asyncio in front of slow, limited, streamed calls (LLM SDKs above all).

At most C calls running, at most Q waiting, an immediate typed refusal beyond that, deadlines
measured from arrival, and permits that are released exactly once.
"""

from ._core import GateStatistics, Status
from ._driver import BoundedGate, Permit
from ._errors import GateError, GateUnavailable, Late, QueueExpired, QueueFull

__version__ = "0.1.0"

__all__ = (
    "BoundedGate",
    "GateError",
    "GateStatistics",
    "GateUnavailable",
    "Late",
    "Permit",
    "QueueExpired",
    "QueueFull",
    "Status",
)

for _name in __all__:
    globals()[_name].__module__ = "boundedgate"
del _name
