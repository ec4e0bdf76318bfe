"""The production-trace windows of ``benchmarks/traces``: the converter, and the committed files.

The converter runs here on a small fixture shaped like the Azure LLM inference trace of 2023
(``data/azure2023_fixture.csv``: five minutes of one request every 5 s, a burst of 20 at 650 s and
another at 800 s, then one request every 10 s from 1205 s): its windows are the ones its rule picks,
and come out the same, byte for byte, every time. The committed windows load through the simulator.
That they are what the converter makes of the real traces needs a clone of the dataset
(``AZURE_PUBLIC_DATASET``, a path): CI has none, and that test is skipped there.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from boundedgate.sim import Provider, Request, read_script, simulate_provider
from boundedgate.sim._provider import Client

ROOT = Path(__file__).parents[2]
TRACES = ROOT / "benchmarks" / "traces"
FIXTURE = Path(__file__).parent / "data" / "azure2023_fixture.csv"


@functools.cache
def converter() -> ModuleType:
    """``benchmarks/traces/convert.py``, which is no package's module, loaded once."""
    spec = importlib.util.spec_from_file_location("boundedgate_traces_convert", TRACES / "convert.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_fixtures_windows_are_the_busiest_the_bursty_and_the_steady_one(tmp_path: Path) -> None:
    convert = converter()
    written = convert.convert({"code": FIXTURE.read_text(encoding="utf-8")}, tmp_path)
    names = [path.name for path in written]
    rules = ("busiest", "bursty", "steady")
    assert names == [*(f"azure2023-code-{rule}.csv" for rule in rules), "windows.json"]
    listing = json.loads((tmp_path / "windows.json").read_text(encoding="utf-8"))
    assert [(w["rule"], w["start_seconds"], w["requests"]) for w in listing] == [
        ("busiest", 0, 60),
        ("bursty", 540, 40),  # the earliest of the two windows holding both bursts
        ("steady", 1200, 30),
    ]
    assert listing[0]["trace_starts_at"] == "2023-11-16 18:00:00.2500000"
    busiest, bursty, steady = (read_script(path) for path in written[:3])
    # Arrivals from the window's start, in whole milliseconds rounded down: 5.0009999 s is 5000 ms.
    assert [job.arrival_ms for job in busiest[:3]] == [0, 5000, 10000]
    assert [job.id for job in busiest[:3]] == ["0", "1", "2"]
    assert {job.arrival_ms for job in bursty} == {110_000, 260_000}
    assert [steady[0].arrival_ms, steady[-1].arrival_ms] == [5000, 295_000]
    # The sizes as the trace gives them, no budget, and the default provider's time to serve them.
    first = busiest[1]
    assert (first.prompt_tokens, first.output_tokens, first.budget_ms) == (110, 21, None)
    assert first.service_ms == round(1000 * Provider(1).service_seconds(110, 21))


def test_the_converter_writes_the_same_bytes_every_time(tmp_path: Path) -> None:
    convert = converter()
    texts = {"code": FIXTURE.read_text(encoding="utf-8")}
    once = [path.read_bytes() for path in convert.convert(texts, tmp_path / "once")]
    again = [path.read_bytes() for path in convert.convert(texts, tmp_path / "again")]
    assert once == again


def test_a_file_that_is_not_the_trace_is_refused() -> None:
    with pytest.raises(ValueError, match="not an Azure LLM inference trace"):
        converter().read_trace("time,prompt,output\n0,1,2\n")


def committed() -> list[dict[str, object]]:
    listing: list[dict[str, object]] = json.loads((TRACES / "windows.json").read_text(encoding="utf-8"))
    return listing


def test_the_committed_windows_load_through_the_simulator() -> None:
    listing = committed()
    assert len(listing) == 6
    for window in listing:
        jobs = read_script(TRACES / str(window["file"]))
        assert len(jobs) == window["requests"]
        assert all(0 <= job.arrival_ms < 300_000 for job in jobs)
        assert all(job.prompt_tokens is not None and job.output_tokens is not None for job in jobs)
        traffic = [Request(j.arrival_ms / 1000, None, 60.0, j.prompt_tokens, j.output_tokens) for j in jobs]
        [result] = simulate_provider([Client("gate", traffic, 20, 60)], Provider(20))
        assert result.requests == len(jobs) > 0
        assert result.on_time > 0


@pytest.mark.skipif(
    not os.environ.get("AZURE_PUBLIC_DATASET"),
    reason="set AZURE_PUBLIC_DATASET to a clone of github.com/Azure/AzurePublicDataset to check that the "
    "committed windows are what benchmarks/traces/convert.py makes of its traces",
)
def test_the_committed_windows_are_what_the_converter_makes_of_the_dataset(tmp_path: Path) -> None:
    convert = converter()
    written = convert.convert(convert.read_from_git(Path(os.environ["AZURE_PUBLIC_DATASET"])), tmp_path)
    assert [path.name for path in written] == [*(str(w["file"]) for w in committed()), "windows.json"]
    for path in written:
        assert path.read_bytes() == (TRACES / path.name).read_bytes(), path.name
