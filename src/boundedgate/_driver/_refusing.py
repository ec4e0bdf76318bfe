"""Entering a permit that looks bound to be refused: an interpreted coroutine, for the compiled build.

mypyc gives an exception that leaves a compiled function a traceback entry of its own, a code
object and a frame made for the purpose, and that costs more than the rest of a refusal; an
interpreted frame is one already. So the compiled ``Permit.__aenter__`` hands a permit that looks
bound to be refused at once (every slot busy, the queue full) to :func:`enter_refused`, which
enters it as the compiled coroutine does and raises the refusal here. Never compiled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import Status

if TYPE_CHECKING:
    from ._permit import Permit

__all__ = ("enter_refused",)

_RUNNING = Status.RUNNING
_QUEUED = Status.QUEUED


async def enter_refused(permit: Permit) -> Permit:
    """Enter ``permit`` as ``Permit.__aenter__`` does; its refusal, if it is refused, is raised here.

    The state may have changed since the hint was taken: a start or a place in the queue is
    handled as the compiled coroutine handles it.
    """
    status = permit._enter()
    if status is _QUEUED:
        await permit._wait()
    elif status is not _RUNNING:
        raise permit._gate._refusal(permit)  # the gate it arrived at (a keyed gate may have moved it)
    return permit
