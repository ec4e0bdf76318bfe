"""The wrapper is a drop-in: attributes pass through, and the helpers that consume the stream release too."""

from __future__ import annotations

import pytest

from boundedgate import Late
from tests.helpers import checked_gate
from tests.streams.sources import Log, SdkLike, outcomes, settle


async def test_attributes_pass_through_and_missing_ones_stay_missing() -> None:
    gate = checked_gate(1, 0)
    source = SdkLike(2)
    stream = gate.try_admit().hand_to(source)
    assert stream.response is source.response
    assert stream.request_id == "req_1"
    assert stream._iterator is source._iterator  # type: ignore[attr-defined]  # the SDKs' private attributes too, untyped
    assert not hasattr(stream, "get_final_completion")  # not on the source: not on the wrapper
    with pytest.raises(AttributeError):
        _ = stream.no_such_attribute  # type: ignore[attr-defined]  # missing on purpose
    assert hasattr(stream, "aclose")  # the source has only close(); the wrapper has both
    await stream.aclose()


async def test_until_done_releases_and_returns_the_wrapper_where_the_sdk_returns_itself() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(SdkLike(3, log))
    assert await stream.until_done() is stream
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_get_final_message_reads_to_the_end_and_releases() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(SdkLike(3))
    assert await stream.get_final_message() == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert await stream.get_final_message() == [0, 1, 2]  # once ended, it only reads the result


async def test_a_helper_error_after_the_stream_ended_is_not_a_failed_request() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(SdkLike(0))
    with pytest.raises(RuntimeError, match="no text block"):
        await stream.get_final_text()
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_helper_that_ends_past_the_deadline_raises_late() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit(timeout=1).hand_to(SdkLike(3, every=1))
    with pytest.raises(Late):
        await stream.get_final_text()
    assert outcomes(gate) == {"running": 0, "late": 1}
    assert await stream.get_final_text() == "t0t1t2"  # the result is still there


async def test_text_stream_releases_at_its_end() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(SdkLike(3))
    assert [text async for text in stream.text_stream] == ["t0", "t1", "t2"]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_breaking_out_of_text_stream_closes_the_stream() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(SdkLike(3, log))
    async for _ in stream.text_stream:
        break
    await settle()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_an_unused_text_stream_attribute_costs_nothing() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(SdkLike(2))
    _ = stream.text_stream  # looked at, never iterated: no finaliser, nothing closed
    await settle()
    assert gate.running == 1
    assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}
