"""The pure decision core, shared by the asyncio driver and the simulator.

Nothing in this package imports an event loop, a clock or threads: it is told the time.
"""

from ._settings import check_deadline, check_max_running, check_max_waiting, check_name, check_timeout
from ._state import GateState
from ._stats import GateStatistics
from ._ticket import Status, Ticket
from ._totals import KeyedStatistics, Totals, total

__all__ = (
    "GateState",
    "GateStatistics",
    "KeyedStatistics",
    "Status",
    "Ticket",
    "Totals",
    "check_deadline",
    "check_max_running",
    "check_max_waiting",
    "check_name",
    "check_timeout",
    "total",
)
