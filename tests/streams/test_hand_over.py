"""Handing a permit to a stream: the block lets go, the stream owns the slot, exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from boundedgate import GatedStream, Status
from tests.helpers import checked_gate
from tests.streams.sources import Log, outcomes, ticks


async def test_the_block_no_longer_releases_once_the_stream_owns_the_slot() -> None:
    gate = checked_gate(1, 1)
    async with gate.admit() as permit:
        stream = permit.hand_to(ticks(3))
    assert isinstance(stream, GatedStream)
    assert permit.status is Status.RUNNING
    assert outcomes(gate) == {"running": 1}
    assert [item async for item in stream] == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_the_usual_shape_a_function_returns_the_stream_from_inside_the_block() -> None:
    gate = checked_gate(1, 1)

    async def open_stream() -> GatedStream[AsyncIterator[int]]:
        async with gate.admit(timeout=30) as permit:
            return permit.hand_to(ticks(2))

    stream = await open_stream()
    assert gate.running == 1
    async with stream:
        assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_block_that_raises_before_the_hand_over_releases_it_as_failed() -> None:
    gate = checked_gate(1, 1)
    with pytest.raises(ConnectionError):
        async with gate.admit() as permit:
            raise ConnectionError("create() failed")
    assert permit.status is Status.FAILED
    assert outcomes(gate) == {"running": 0, "failed": 1}


async def test_a_block_that_raises_after_the_hand_over_leaves_the_slot_to_the_stream() -> None:
    # The stream may already be in use elsewhere: it alone decides when the request ends.
    gate = checked_gate(1, 1)
    log = Log()
    with pytest.raises(KeyError):
        async with gate.admit() as permit:
            stream = permit.hand_to(ticks(3, log))
            raise KeyError("after")
    assert outcomes(gate) == {"running": 1}
    assert await stream.__anext__() == 0
    await stream.aclose()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_the_block_raises_no_late_once_the_stream_owns_the_slot() -> None:
    gate = checked_gate(1, 1)
    async with gate.admit(timeout=1) as permit:
        stream = permit.hand_to(ticks(1, every=5), raise_late=False)
        await stream.__anext__()  # past the deadline, inside the block
    assert gate.running == 1
    await stream.aclose()
    assert outcomes(gate) == {"running": 0, "late": 1}


async def test_a_try_admit_permit_can_be_handed_over() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(ticks(2))
    assert gate.running == 1
    assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_handing_over_twice_is_refused() -> None:
    gate = checked_gate(1, 0)
    permit = gate.try_admit()
    stream = permit.hand_to(ticks(1))
    source = ticks(1)
    with pytest.raises(RuntimeError, match="already handed to a stream"):
        permit.hand_to(source)
    await stream.aclose()
    await source.aclose()


async def test_a_permit_without_a_slot_cannot_be_handed_over() -> None:
    gate = checked_gate(1, 0)
    permit = gate.try_admit()
    permit.release()
    source = ticks(1)
    with pytest.raises(RuntimeError, match="holds no slot"):
        permit.hand_to(source)
    with pytest.raises(RuntimeError, match="holds no slot"):
        gate.admit().hand_to(source)
    await source.aclose()


async def test_only_an_async_iterator_can_be_handed_the_slot_and_the_block_keeps_it_otherwise() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(TypeError, match="async iterator"):
        async with gate.admit() as permit:
            permit.hand_to([1, 2, 3])  # type: ignore[type-var]  # not an async iterator, on purpose
    assert outcomes(gate) == {"running": 0, "failed": 1}


async def test_repr_names_the_gate_and_the_wrapped_type() -> None:
    gate = checked_gate(1, 0, name="openai")
    stream = gate.try_admit().hand_to(ticks(1))
    assert repr(stream) == "<GatedStream of gate 'openai': running, over builtins.async_generator>"
    await stream.aclose()
    assert "completed" in repr(stream)
