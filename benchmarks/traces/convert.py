"""Cut windows of the Azure LLM inference traces of 2023 into simulator scripts (see README.md here).

The source is two CSV files of the Azure public dataset (CC-BY 4.0; Patel et al., "Splitwise:
Efficient generative LLM inference using phase splitting", ISCA 2024), one row per request:
``TIMESTAMP`` (when it came), ``ContextTokens`` (its prompt) and ``GeneratedTokens`` (its answer).
Each file becomes three windows of five minutes, chosen by this rule, with start offsets on whole
minutes from the trace's first request, no two windows overlapping:

* ``busiest``: the window with the most requests (the earliest of equals);
* ``bursty``: of the others holding at least half the busiest's requests, the one whose arrivals per
  10 seconds vary most (the largest coefficient of variation: standard deviation over mean);
* ``steady``: of the others holding at least half the busiest's requests, the one whose arrivals
  per 10 seconds vary least.

Each window is written as a script ``boundedgate.sim.read_script`` reads (``azure2023-<trace>-<rule>
.csv``): one request a row, in the trace's order, its id its row number in the window, its arrival
in whole milliseconds from the window's start (rounded down), its ``prompt_tokens`` and
``output_tokens`` as the trace gives them, no budget (the trace has none: a benchmark sets it), and
a ``service_ms`` (which a script requires) of the time ``boundedgate.sim.Provider``'s default
speeds take to serve it (a provider with speeds of its own derives its time from the sizes).
``windows.json`` lists each window: its trace, rule, start (offset and the trace's own timestamp),
requests, and the coefficient of variation the rule compared.

Run: ``python benchmarks/traces/convert.py CODE.csv CONV.csv [--out DIR]``, or with ``--git REPO``
a clone (or bare mirror) of github.com/Azure/AzurePublicDataset to read both files from its HEAD.
Each file must be the one the committed windows were cut from (``SOURCES``: its SHA-256). The
output is the same, byte for byte, for the same input.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from boundedgate.sim import Job, Provider, write_script

#: The traces, by the name their windows take, and their file in the dataset's repository.
TRACES = {"code": "data/AzureLLMInferenceTrace_code.csv", "conv": "data/AzureLLMInferenceTrace_conv.csv"}
#: The SHA-256 of each file the committed windows were cut from (the repository's commit b469a11).
SOURCES = {
    "code": "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
    "conv": "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
}
#: A window's length, and the step between the start offsets tried, in seconds.
WINDOW_SECONDS = 300
STEP_SECONDS = 60
#: The bins whose arrival counts the bursty and steady rules compare, in seconds.
BIN_SECONDS = 10
#: The bursty and steady windows hold at least this share of the busiest one's requests.
LEAST_SHARE = 0.5
#: The rules, in the order they choose.
RULES = ("busiest", "bursty", "steady")
#: The trace's timestamps count in ticks of 100 ns (seven decimal places).
TICKS_PER_SECOND = 10_000_000
TICKS_PER_MS = TICKS_PER_SECOND // 1000

_SPEEDS = Provider(1)


@dataclass(frozen=True, slots=True)
class Row:
    """One request of a trace: when it came (ticks of 100 ns since the trace's first), its sizes."""

    ticks: int
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Window:
    """A window chosen by a rule: its start (seconds from the trace's first request) and its rows."""

    trace: str
    rule: str
    start: int
    rows: tuple[Row, ...]
    variation: float

    @property
    def name(self) -> str:
        """Its file's name, without the suffix."""
        return f"azure2023-{self.trace}-{self.rule}"


def _ticks(stamp: str) -> int:
    """A timestamp such as ``2023-11-16 18:17:03.9799600`` in ticks of 100 ns since the epoch, exactly."""
    whole, _, fraction = stamp.strip().partition(".")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())  # not local time
    if len(fraction) > 7 or not (fraction == "" or fraction.isdigit()):
        raise ValueError(f"a timestamp with more than 7 decimal places, or not a number: {stamp!r}")
    return seconds * TICKS_PER_SECOND + int(fraction.ljust(7, "0"))


def read_trace(text: str) -> tuple[str, list[Row]]:
    """A trace's CSV text: the timestamp of its first request, and its rows, times from that one.

    Raises:
        ValueError: A header other than the dataset's, or rows out of time order.
    """
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = next(reader)
    if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise ValueError(f"not an Azure LLM inference trace of 2023: its header is {header!r}")
    cells = [row for row in reader if row]
    first = _ticks(cells[0][0])
    rows = [Row(_ticks(stamp) - first, int(prompt), int(output)) for stamp, prompt, output in cells]
    if any(later.ticks < earlier.ticks for earlier, later in itertools.pairwise(rows)):
        raise ValueError("the trace's rows are not in time order")
    return cells[0][0].strip(), rows


def _within(rows: Sequence[Row], start: int) -> tuple[Row, ...]:
    low, high = start * TICKS_PER_SECOND, (start + WINDOW_SECONDS) * TICKS_PER_SECOND
    return tuple(row for row in rows if low <= row.ticks < high)


def _variation(rows: Sequence[Row], start: int) -> float:
    """The coefficient of variation of the window's arrivals per ``BIN_SECONDS``."""
    counts = [0] * (WINDOW_SECONDS // BIN_SECONDS)
    for row in rows:
        counts[(row.ticks // TICKS_PER_SECOND - start) // BIN_SECONDS] += 1
    mean = statistics.fmean(counts)
    return statistics.pstdev(counts) / mean if mean else math.inf


def choose_windows(trace: str, rows: Sequence[Row]) -> list[Window]:
    """The busiest, bursty and steady windows of a trace, by the module's rule."""
    last = rows[-1].ticks // TICKS_PER_SECOND
    starts = range(0, last - WINDOW_SECONDS + 1, STEP_SECONDS)
    candidates = {start: _within(rows, start) for start in starts}
    busiest = max(starts, key=lambda start: (len(candidates[start]), -start))
    chosen = [busiest]
    least = LEAST_SHARE * len(candidates[busiest])

    def free(start: int) -> bool:
        full = len(candidates[start]) >= least
        return full and all(abs(start - other) >= WINDOW_SECONDS for other in chosen)

    variations = {start: _variation(candidates[start], start) for start in starts}
    bursty = max(filter(free, starts), key=lambda start: (variations[start], -start))
    chosen.append(bursty)
    steady = min(filter(free, starts), key=lambda start: (variations[start], start))
    chosen.append(steady)
    return [
        Window(trace, rule, start, candidates[start], variations[start])
        for rule, start in zip(RULES, chosen, strict=True)
    ]


def window_jobs(window: Window) -> list[Job]:
    """A window's requests as a script's jobs (see the module for each column)."""
    origin = window.start * TICKS_PER_SECOND
    return [
        Job(
            str(index),
            (row.ticks - origin) // TICKS_PER_MS,
            max(1, round(1000 * _SPEEDS.service_seconds(row.prompt_tokens, row.output_tokens))),
            prompt_tokens=row.prompt_tokens,
            output_tokens=row.output_tokens,
        )
        for index, row in enumerate(window.rows)
    ]


def convert(texts: dict[str, str], out: Path) -> list[Path]:
    """Write each trace's windows and ``windows.json`` into ``out``; the paths written, in order."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    listing = []
    for trace, text in texts.items():
        first, rows = read_trace(text)
        for window in choose_windows(trace, rows):
            path = out / f"{window.name}.csv"
            write_script(window_jobs(window), path)
            written.append(path)
            listing.append(
                {
                    "file": path.name,
                    "trace": trace,
                    "source": TRACES[trace],
                    "rule": window.rule,
                    "trace_starts_at": first,
                    "start_seconds": window.start,
                    "seconds": WINDOW_SECONDS,
                    "requests": len(window.rows),
                    "arrivals_per_10s_variation": round(window.variation, 4),
                }
            )
    index = out / "windows.json"
    index.write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    return [*written, index]


def check_source(trace: str, data: bytes) -> str:
    """``data`` as text, if it is the file the committed windows were cut from.

    Raises:
        ValueError: Another file (another version of the dataset, or another trace).
    """
    digest = hashlib.sha256(data).hexdigest()
    if digest != SOURCES[trace]:
        raise ValueError(
            f"{TRACES[trace]} is not the file the windows were cut from (its SHA-256 is {digest}, not "
            f"{SOURCES[trace]}): use the dataset's commit b469a11, or update SOURCES and the windows"
        )
    return data.decode("utf-8")


def read_from_git(repo: Path) -> dict[str, str]:
    """Both traces' text from the HEAD of a clone (or a bare mirror) of the dataset's repository, checked."""
    return {
        trace: check_source(
            trace,
            subprocess.run(
                ["git", "-C", str(repo), "show", f"HEAD:{path}"], check=True, capture_output=True
            ).stdout,
        )
        for trace, path in TRACES.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the traces given on the command line (or read from ``--git``) into windows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("code", nargs="?", type=Path, help="AzureLLMInferenceTrace_code.csv")
    parser.add_argument("conv", nargs="?", type=Path, help="AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--git", type=Path, help="a clone of Azure/AzurePublicDataset to read both from")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="where to write them")
    args = parser.parse_args(argv)
    if args.git is not None:
        texts = read_from_git(args.git)
    elif args.code is not None and args.conv is not None:
        texts = {
            trace: check_source(trace, path.read_bytes())
            for trace, path in (("code", args.code), ("conv", args.conv))
        }
    else:
        parser.error("give both CSV files, or --git REPO")
    for path in convert(texts, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
