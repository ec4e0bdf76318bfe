"""How a running request ends: one rule, ``ended_as``, for every gate's release."""

from __future__ import annotations

import pytest

from boundedgate._core import GateState, Status, Ticket, ended_as

ABNORMAL = (Status.FAILED, Status.ABORTED, Status.LEAKED, Status.CUT)


@pytest.mark.parametrize(
    ("now", "expected"), [(9.0, Status.COMPLETED), (10.0, Status.LATE), (11.0, Status.LATE)]
)
def test_a_normal_end_is_late_at_or_after_the_deadline(now: float, expected: Status) -> None:
    assert ended_as(None, now, 10.0) is expected


@pytest.mark.parametrize("ending", ABNORMAL)
def test_an_abnormal_end_is_its_own_outcome_whatever_the_time(ending: Status) -> None:
    assert ended_as(ending, 9.0, 10.0) is ending
    assert ended_as(ending, 11.0, 10.0) is ending


@pytest.mark.parametrize("ending", [s for s in Status if s not in ABNORMAL])
def test_any_other_ending_is_refused_and_the_core_changes_nothing(ending: Status) -> None:
    with pytest.raises(ValueError, match=f"cannot end as {ending.value}"):
        ended_as(ending, 9.0, 10.0)
    state = GateState(1, 0)
    ticket = Ticket(10.0)
    state.arrive(ticket, 0.0)
    with pytest.raises(ValueError, match=f"cannot end as {ending.value}"):
        state.release(ticket, 5.0, ending)
    assert (ticket.status, state.running, state.completed) == (Status.RUNNING, 1, 0)
