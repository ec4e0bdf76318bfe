"""The pure decision core, shared by the asyncio driver and the simulator.

Nothing in this package imports an event loop, a clock or threads: it is told the time.
"""

from ._bucket import RateLimit, TokenBucket
from ._limits import GateLimits, check_limits
from ._settings import (
    check_cost,
    check_deadline,
    check_jump_share,
    check_max_running,
    check_max_waiting,
    check_name,
    check_priorities,
    check_priority,
    check_timeout,
)
from ._state import GateState
from ._stats import GateStatistics
from ._ticket import Status, Ticket
from ._totals import KeyedStatistics, Totals, total

__all__ = (
    "GateLimits",
    "GateState",
    "GateStatistics",
    "KeyedStatistics",
    "RateLimit",
    "Status",
    "Ticket",
    "TokenBucket",
    "Totals",
    "check_cost",
    "check_deadline",
    "check_jump_share",
    "check_limits",
    "check_max_running",
    "check_max_waiting",
    "check_name",
    "check_priorities",
    "check_priority",
    "check_timeout",
    "total",
)
