"""The pure decision core, shared by the asyncio driver and the simulator.

Nothing in this package imports an event loop, a clock or threads: it is told the time.
"""

from importlib.machinery import ExtensionFileLoader

from . import _state
from ._adaptive import MAX_PAUSE, SIGNALS, Adaptive, AdaptiveLimit, provider_pause
from ._bucket import RateLimit, TokenBucket
from ._limits import GateLimits, check_limits
from ._native import BoolArg, FloatArg, IntArg, StrArg, mypyc_attr, restore_docstrings
from ._outcomes import BY_NAME, BY_STATUS, NEVER_RAN, OUTCOMES, RAN, SIMULATED, Outcome
from ._queue import WaitQueue
from ._record import DECISIONS, RequestRecord
from ._settings import (
    MAX_COUNT,
    check_at_least,
    check_cost,
    check_count,
    check_deadline,
    check_flag,
    check_fraction,
    check_jump_share,
    check_max_pause,
    check_max_running,
    check_max_wait,
    check_max_waiting,
    check_name,
    check_number,
    check_pause,
    check_positive,
    check_priorities,
    check_priority,
    check_remaining,
    check_timeout,
    shown,
)
from ._state import RECENT_RUN_WEIGHT, GateState, ended_as, pace_weight, queue_deadline
from ._stats import GateStatistics
from ._ticket import Status, Ticket, arrival_of, durations_of, end_of, note, start_of
from ._totals import NOT_HISTORY, KeyedStatistics, Totals, total

__all__ = (
    "BY_NAME",
    "BY_STATUS",
    "COMPILED",
    "DECISIONS",
    "MAX_COUNT",
    "MAX_PAUSE",
    "NEVER_RAN",
    "NOT_HISTORY",
    "OUTCOMES",
    "RAN",
    "RECENT_RUN_WEIGHT",
    "SIGNALS",
    "SIMULATED",
    "Adaptive",
    "AdaptiveLimit",
    "BoolArg",
    "FloatArg",
    "GateLimits",
    "GateState",
    "GateStatistics",
    "IntArg",
    "KeyedStatistics",
    "Outcome",
    "RateLimit",
    "RequestRecord",
    "Status",
    "StrArg",
    "Ticket",
    "TokenBucket",
    "Totals",
    "WaitQueue",
    "arrival_of",
    "check_at_least",
    "check_cost",
    "check_count",
    "check_deadline",
    "check_flag",
    "check_fraction",
    "check_jump_share",
    "check_limits",
    "check_max_pause",
    "check_max_running",
    "check_max_wait",
    "check_max_waiting",
    "check_name",
    "check_number",
    "check_pause",
    "check_positive",
    "check_priorities",
    "check_priority",
    "check_remaining",
    "check_timeout",
    "durations_of",
    "end_of",
    "ended_as",
    "mypyc_attr",
    "note",
    "pace_weight",
    "provider_pause",
    "queue_deadline",
    "restore_docstrings",
    "shown",
    "start_of",
    "total",
)

#: True when the decision core and the permit run compiled by mypyc (a wheel built with a C
#: compiler, imported without ``BOUNDEDGATE_NO_EXTENSIONS`` set); False for the pure-Python build.
#: Public as ``boundedgate.COMPILED``.
COMPILED: bool = isinstance(getattr(_state.__spec__, "loader", None), ExtensionFileLoader)
if COMPILED:
    restore_docstrings(Status)
