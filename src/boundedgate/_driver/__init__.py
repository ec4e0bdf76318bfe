"""The asyncio driver: the only package that knows about the event loop."""

from .._core import COMPILED, restore_docstrings
from ._bounded import BoundedGate
from ._chain import Chain, is_chain, is_keyed
from ._combined import CombinedPermit, admit_all
from ._combined_permit import is_cluster_gate, is_cluster_keyed
from ._compat import cancellation_pending
from ._gate import Cutter, GateBase, Permit, check_on_deadline
from ._keyed import KeyedGate
from ._keys import KeyedBase
from ._observing import Observer, Observers, log_event, logger

if COMPILED:
    restore_docstrings(GateBase, KeyedBase, Permit, CombinedPermit, Cutter)

__all__ = (
    "BoundedGate",
    "Chain",
    "CombinedPermit",
    "Cutter",
    "KeyedGate",
    "Observer",
    "Observers",
    "Permit",
    "admit_all",
    "cancellation_pending",
    "check_on_deadline",
    "is_chain",
    "is_cluster_gate",
    "is_cluster_keyed",
    "is_keyed",
    "log_event",
    "logger",
)
