"""The asyncio driver: the only package that knows about the event loop."""

from ._gate import BoundedGate
from ._permit import Permit

__all__ = ("BoundedGate", "Permit")
