"""The decision core's invariants, asserted by the tests (pure: no event loop, so it runs on 3.10 too)."""

from __future__ import annotations

from boundedgate._core import GateState


def check_invariants(state: GateState, now: float | None = None) -> None:
    """Assert a gate state's invariants (costs O(queue)). ``now`` is the time of its last event.

    The state checks itself (:meth:`GateState.check`), as the module's header states them.
    """
    state.check(now)
