"""The ``boundedgate`` logger: one structured record per refusal and per ending nobody asked for
(late, leaked), and nothing for normal traffic at INFO."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from boundedgate import BoundedGate, QueueExpired, QueueFull
from boundedgate._driver._observing import log_event


async def test_normal_traffic_writes_nothing_at_info(caplog: pytest.LogCaptureFixture) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2, name="quiet")
    with caplog.at_level(logging.DEBUG, logger="boundedgate"):
        for _ in range(5):
            async with gate.admit(timeout=10):
                await asyncio.sleep(0.1)
    assert caplog.records == []


async def test_a_refusal_is_one_record_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="openai")
    holder = gate.try_admit()
    with caplog.at_level(logging.INFO, logger="boundedgate"), pytest.raises(QueueFull):
        async with gate.admit():
            pass
    holder.release()
    (record,) = caplog.records
    assert record.name == "boundedgate"
    assert record.levelno == logging.INFO
    fields = {k: getattr(record, k) for k in ("gate", "outcome", "error_code", "decision", "limited")}
    assert fields == {
        "gate": "openai",
        "outcome": "rejected",
        "error_code": "queue_full",
        "decision": "reject",
        "limited": True,
    }
    assert (record.rate_limit_key, record.waited_ms, record.queue_depth) == ("openai", 0.0, 0)  # type: ignore[attr-defined]
    assert "openai: request rejected at once" in record.getMessage()


async def test_an_expiry_and_a_late_ending_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    gate = BoundedGate(max_running=1, max_waiting=1, name="g")
    holder = gate.try_admit()
    with caplog.at_level(logging.INFO, logger="boundedgate"):
        with pytest.raises(QueueExpired):
            async with gate.admit(timeout=2):
                pass
        holder.release()
        async with gate.admit(timeout=1, raise_late=False):
            await asyncio.sleep(1)
    assert [(r.outcome, r.levelno) for r in caplog.records] == [  # type: ignore[attr-defined]
        ("expired", logging.INFO),
        ("late", logging.INFO),
    ]
    assert caplog.records[0].waited_ms == pytest.approx(2000)  # type: ignore[attr-defined]


async def test_a_leak_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    import gc

    gate = BoundedGate(max_running=1, max_waiting=0, name="g")

    async def chunks() -> AsyncIterator[str]:
        yield "a"

    stream = await gate.stream(chunks)
    with caplog.at_level(logging.WARNING, logger="boundedgate"), pytest.warns(ResourceWarning):
        del stream
        gc.collect()
        await asyncio.sleep(0)
    (record,) = caplog.records
    assert (record.outcome, record.levelno) == ("leaked", logging.WARNING)  # type: ignore[attr-defined]


def test_events_of_the_edges_are_records_too(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        log_event("shared", "lease_lost", "a lease expired on the server", lease="abc")
    (record,) = caplog.records
    assert (record.gate, record.event, record.lease) == ("shared", "lease_lost", "abc")  # type: ignore[attr-defined]


def test_the_logger_has_a_null_handler_so_nothing_prints_by_default() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("boundedgate").handlers)


async def _refuse_one(gate: BoundedGate) -> None:
    holder = gate.try_admit()
    with pytest.raises(QueueFull):
        async with gate.admit():
            pass
    holder.release()


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.outcome for r in caplog.records if r.name == "boundedgate"]  # type: ignore[attr-defined]


async def test_the_logger_is_read_at_each_refusal_not_when_the_gate_was_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A gate made, and refusing, while the logger is off at INFO; then the level is lowered, raised
    # and lowered again: each refusal follows the level of its moment (the logger's level cache).
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    logger = logging.getLogger("boundedgate")
    root = logging.getLogger()
    with caplog.at_level(logging.DEBUG, logger="boundedgate"):  # caplog's handler takes every level
        logger.setLevel(logging.WARNING)  # (restored by at_level)
        await _refuse_one(gate)
        assert _refusals(caplog) == []
        logger.setLevel(logging.INFO)
        await _refuse_one(gate)
        assert _refusals(caplog) == ["rejected"]
        logger.setLevel(logging.WARNING)
        await _refuse_one(gate)
        assert _refusals(caplog) == ["rejected"]
        level = root.level
        root.setLevel(logging.DEBUG)  # the root's level does not enable a logger set to WARNING
        try:
            await _refuse_one(gate)
            assert _refusals(caplog) == ["rejected"]
            logger.setLevel(logging.NOTSET)  # now the root's DEBUG is the logger's level
            await _refuse_one(gate)
            assert _refusals(caplog) == ["rejected", "rejected"]
            root.setLevel(logging.WARNING)  # and the root's WARNING too
            await _refuse_one(gate)
            assert _refusals(caplog) == ["rejected", "rejected"]
        finally:
            root.setLevel(level)


async def test_logging_disable_and_a_disabled_logger_silence_refusals_until_lifted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    logger = logging.getLogger("boundedgate")
    with caplog.at_level(logging.INFO, logger="boundedgate"):
        await _refuse_one(gate)  # the level cache now holds INFO as enabled
        logging.disable(logging.INFO)
        try:
            await _refuse_one(gate)
        finally:
            logging.disable(logging.NOTSET)
        assert _refusals(caplog) == ["rejected"]
        await _refuse_one(gate)
        assert _refusals(caplog) == ["rejected", "rejected"]
        logger.disabled = True  # what logging.config does to the loggers it does not name
        try:
            await _refuse_one(gate)
        finally:
            logger.disabled = False
        assert _refusals(caplog) == ["rejected", "rejected"]
        await _refuse_one(gate)
        assert _refusals(caplog) == ["rejected", "rejected", "rejected"]


async def test_a_handler_added_after_the_gate_was_made_gets_the_refusal_record() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="late-handler")
    logger = logging.getLogger("boundedgate")
    await _refuse_one(gate)  # nothing listens yet

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    handler = Collect()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        await _refuse_one(gate)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [(r.gate, r.outcome) for r in handler.records] == [("late-handler", "rejected")]  # type: ignore[attr-defined]


async def test_a_leak_is_checked_at_warning_not_at_info(caplog: pytest.LogCaptureFixture) -> None:
    # The reporter asks the logger about the record's own level: a logger at WARNING logs a leak
    # (WARNING) and not a refusal (INFO), whatever it answered for the other level before.
    import gc

    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        await _refuse_one(gate)
        permit = gate.try_admit()
        with pytest.warns(ResourceWarning):
            del permit
            gc.collect()
            await asyncio.sleep(0)
    assert [(r.outcome, r.levelno) for r in caplog.records] == [("leaked", logging.WARNING)]  # type: ignore[attr-defined]
