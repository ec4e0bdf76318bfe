"""Every python block in the README and the docs runs and prints what it shows, and the examples give
the worked example's answers, in virtual time, and the docs site builds with warnings as errors.

A ```` ```python ```` block runs on its own; a ```` ```py ```` block is a fragment shown, not run (the
larger program it belongs to is tested elsewhere, or it needs a service the docs cannot start).

Each block runs on two clocks, both virtual (no test sleeps): an exact one, which starts at 0 and
fires every timer on time, and a late one, which behaves as a real loop's clock does: it reads an
arbitrary time, and every timer fires late by ``LATENESS`` (the time the loop's other callbacks
take). What a block prints and asserts must hold on both, so it holds on a reader's real loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import runpy
import socket
import sys
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVarTuple, Unpack

import looptime
import pytest

from tests.fake_provider import fake_provider

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: (page, block): every block fenced as ```python, on every page.
BLOCKS = [
    (page.relative_to(ROOT).as_posix(), block)
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
]
#: Blocks that make a real SDK client talk to the fake provider (tests/fake_provider.py).
SDK_CLIENT = re.compile(r"\bAsync(OpenAI|Anthropic)\(")


#: How late every timer fires on the late clock: a real loop's timers fire late by what its other
#: callbacks take, a millisecond or two on an idle machine, tens of them on a loaded one.
LATENESS = 0.02
#: Where the late clock starts: a real loop's clock reads the time since boot, never 0.
BOOTED = 86_400.123
Ts = TypeVarTuple("Ts")


class _LateTimers(asyncio.SelectorEventLoop):
    """asyncio's loop, every timer of which fires ``LATENESS`` after its time."""

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return super().call_at(when + LATENESS, callback, *args, context=context)


_LateLoop = looptime.make_event_loop_class(_LateTimers)

#: The clocks a block runs on, by name: a function making a loop on it.
CLOCKS = {
    "exact": lambda: looptime.new_event_loop(start=0),
    "late": lambda: _LateLoop(start=BOOTED),
}


def run_on_virtual_time(coro: Coroutine[Any, Any, Any], clock: str = "exact") -> Any:
    loop = CLOCKS[clock]()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            # As asyncio.run does: the SDKs' streams leave async generators to asyncio's finaliser.
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


@pytest.fixture
def clock() -> str:
    """The clock ``asyncio.run`` runs on (a test parametrizes it)."""
    return "exact"


@pytest.fixture
def virtual_asyncio_run(monkeypatch: pytest.MonkeyPatch, clock: str) -> None:
    monkeypatch.setattr(asyncio, "run", lambda coro: run_on_virtual_time(coro, clock))


def test_the_readme_and_every_concept_page_have_python_blocks() -> None:
    pages = {page for page, _ in BLOCKS}
    assert "README.md" in pages
    for concept in (
        "outcomes",
        "streams",
        "http",
        "priorities",
        "rate-limits",
        "keys",
        "metrics",
        "simulator",
    ):
        assert f"docs/{concept}.md" in pages, concept


@pytest.fixture
def fake_llm_provider(monkeypatch: pytest.MonkeyPatch, clock: str) -> Iterator[None]:
    """The SDKs' environment points at a fake provider that ``asyncio.run`` starts on its loop."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")

    async def serving(coro: Coroutine[Any, Any, Any]) -> Any:
        async with fake_provider(sock=listening):
            return await coro

    monkeypatch.setattr(asyncio, "run", lambda coro: run_on_virtual_time(serving(coro), clock))
    with warnings.catch_warnings():
        # The examples name real models; an SDK release that retires one must not fail the docs.
        warnings.filterwarnings("ignore", message="The model .* is deprecated", category=DeprecationWarning)
        yield
    listening.close()


def promised_output(block: str) -> dict[int, list[str]]:
    """What the block says its prints print, by line: ``print(x)  # shown`` (up to a ": " that
    starts a remark), and the ``# shown`` lines right below a print (one per line it prints)."""
    lines = block.splitlines()
    promised: dict[int, list[str]] = {}
    for number, line in enumerate(lines, start=1):
        if "print(" not in line:
            continue
        _, _, remark = line.partition("  # ")
        shown = [remark.split(": ")[0]] if remark else []
        below = number
        while below < len(lines) and lines[below].startswith("# "):
            shown.append(lines[below][2:])
            below += 1
        if shown:
            promised[number] = shown
    return promised


def _block_ids() -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for page, _ in BLOCKS:
        seen[page] = seen.get(page, 0) + 1
        ids.append(f"{page}:{seen[page]}")
    return ids


@pytest.mark.parametrize("clock", CLOCKS)
@pytest.mark.parametrize(("page", "block"), BLOCKS, ids=_block_ids())
@pytest.mark.usefixtures("virtual_asyncio_run")
def test_every_block_runs_and_prints_what_it_says(
    page: str, block: str, request: pytest.FixtureRequest
) -> None:
    if SDK_CLIENT.search(block):
        request.getfixturevalue("fake_llm_provider")
    printed: dict[int, list[str]] = {}

    def recording_print(*values: object, sep: str | None = " ", **kwargs: Any) -> None:
        caller = sys._getframe(1)
        if caller.f_code.co_filename == page:
            text = (" " if sep is None else sep).join(map(str, values))
            printed.setdefault(caller.f_lineno, []).append(text)
        print(*values, sep=sep, **kwargs)

    exec(compile(block, page, "exec"), {"__name__": "__main__", "print": recording_print})
    for number, shown in promised_output(block).items():
        assert printed.get(number) == shown, f"{page} block line {number}"


@pytest.mark.usefixtures("virtual_asyncio_run")
def test_the_five_requests_example_agrees_with_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(ROOT / "examples" / "five_requests.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    assert out.count("agrees") == 5
    assert re.search(r"^C\s+completed\s+-\s+100\s+150\s+100\s+agrees$", out, flags=re.MULTILINE)
    assert re.search(r"^D\s+expired\s+QueueExpired\s+-\s+90\s+90\s+agrees$", out, flags=re.MULTILINE)
    assert "C ran 50 ms, but its caller waited 150 ms" in out


#: What means something only inside the project: its design seeds, their cases and its issue numbers.
INTERNAL = re.compile(r"\bseeds? ?0\d\d\b|\bseed's\b|\bL0\d\b|\bissue \d+|\bdefect \d+", flags=re.IGNORECASE)


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_user_facing_text_names_things_not_internal_references(page: Path) -> None:
    found = INTERNAL.findall(page.read_text(encoding="utf-8"))
    assert not found, found


def test_the_readme_stays_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for heading in (
        "## Install",
        "## Quick start",
        "## Serving HTTP with FastAPI",
        "## What happens to a request",
    ):
        assert f"\n{heading}\n" in text, heading
