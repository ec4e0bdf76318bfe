"""The core's hooks under random traffic: every ticket that reaches its outcome is told to the
observer exactly once, in the event that ended it, and the reporter hears exactly the logged ones.

The core's own state machine (tests/core/test_state.py) drives the traffic; this one sets both
hooks on its state and checks them after every step.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from boundedgate import OUTCOMES, RequestRecord
from boundedgate._core import GateState, Ticket
from tests.core.test_state import GateStateMachine

LOGGED = {outcome.status for outcome in OUTCOMES if outcome.logged}


class ObservedStateMachine(GateStateMachine):
    """The core's state machine, with both hooks set."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[Ticket] = []
        self.reported: list[Ticket] = []

    @precondition(lambda self: self.state is None)
    @rule(
        running=st.integers(1, 4),
        waiting=st.none() | st.integers(0, 5),
        priorities=st.integers(1, 3),
        share=st.sampled_from([0, 0.2, 0.5]),
    )
    def create(self, running: int, waiting: int | None, priorities: int, share: float) -> None:
        state = self.state = GateState(running, waiting, priorities, share)

        def observe(ticket: Ticket) -> None:
            assert ticket.status.is_final
            record = RequestRecord.of(ticket, state, "g")
            assert record.outcome.status is ticket.status
            assert record.waited >= 0
            assert record.end_to_end >= record.waited
            assert (record.decision == "reject") == record.outcome.at_arrival
            assert record.queue_depth is not None
            self.told.append(ticket)

        state.observer = observe
        state.reporter = self.reported.append

    @invariant()
    def every_ending_is_told_once(self) -> None:
        ended = [t for t in self.tickets if t.status.is_final]
        assert len(self.told) == len({id(t) for t in self.told})
        assert {id(t) for t in self.told} == {id(t) for t in ended}
        assert {id(t) for t in self.reported} == {id(t) for t in ended if t.status in LOGGED}


TestObservedStateMachine = ObservedStateMachine.TestCase
