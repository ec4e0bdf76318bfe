"""A real browser against the gate: Debian's chromium, driven by Playwright, opens an ``EventSource``.

A browser's ``EventSource`` gives up for good on any status but 200, so a gated SSE route refuses it
in SSE mode (``sse_refusal=True``: a 200 event stream with ``retry:`` and an ``error`` event): the
page comes back by itself after ``Retry-After`` and is served once the slot frees; closing the page
that held the slot frees it. Real time (looptime off); every bound comes from the settings here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from boundedgate import BoundedGate
from tests.asgi.servers import chromium_binary, require, served

pytestmark = [pytest.mark.browser, pytest.mark.http_server, pytest.mark.looptime(False)]

RETRY_AFTER = 1  # seconds: the refusal's Retry-After and its SSE retry: field
TICK = 0.1  # seconds between the route's events
WAIT = 10.0  # seconds any one step may take on a loaded machine (a retry takes RETRY_AFTER)
LAUNCH = 60.0  # seconds chromium may take to start: 10 were not enough with both cores busy

PAGE = b"""<!doctype html><html><body><script>
window.log = [];
window.source = new EventSource("/events");
source.addEventListener("error", (e) => {
  log.push(e.data ? "refused:" + JSON.parse(e.data).code : "reconnecting");
});
source.addEventListener("tick", (e) => log.push("tick:" + e.data));
</script></body></html>"""


def _service(gate: BoundedGate) -> Any:
    require("starlette", "pip install 'boundedgate[test]'")
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, StreamingResponse
    from starlette.routing import Route

    from boundedgate.asgi import GateMiddleware

    async def page(request: Any) -> Any:
        return HTMLResponse(PAGE)

    async def events(request: Any) -> Any:
        async def ticks() -> AsyncIterator[str]:
            for n in range(int(60 / TICK)):  # bounded: a minute at most
                yield f"event: tick\ndata: {n}\n\n"
                await asyncio.sleep(TICK)

        return StreamingResponse(ticks(), media_type="text/event-stream")

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, None]]:
        app = Starlette(routes=[Route("/", page), Route("/events", events)])
        gated = GateMiddleware(
            app, gate=gate, exempt=["/"], sse_refusal=True, retry_after_fallback=RETRY_AFTER
        )
        yield gated, None

    return build


async def _log(page: Any) -> list[str]:
    return list(await page.evaluate("window.log"))


async def _until_logged(page: Any, prefix: str, *, count: int = 1, timeout: float) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        log = await _log(page)
        if sum(1 for entry in log if entry.startswith(prefix)) >= count:
            return log
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"not within {timeout} s: {count} x {prefix!r} in the page's log {log}")
        await asyncio.sleep(0.02)


async def test_an_event_source_refused_in_sse_mode_comes_back_and_closing_a_page_frees_its_slot() -> None:
    executable = chromium_binary()
    playwright_api = require(
        "playwright.async_api", "pip install playwright (its browser download is not used)"
    )
    gate = BoundedGate(max_running=1, max_waiting=0, name="events")
    with served(_service(gate), limit=60) as server:
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=executable, timeout=LAUNCH * 1000)
            try:
                holder = await browser.new_page()
                await holder.goto(server.url + "/")
                await _until_logged(holder, "tick:", timeout=WAIT)
                assert await server.call(lambda: gate.running) == 1

                waiter = await browser.new_page()
                await waiter.goto(server.url + "/")
                # Refused, and refused again after the retry: the EventSource did not give up.
                log = await _until_logged(waiter, "refused:", count=2, timeout=WAIT + 2 * RETRY_AFTER)
                assert set(log) <= {"refused:queue_full", "reconnecting"}
                assert await waiter.evaluate("source.readyState") != 2  # not CLOSED

                await holder.close()  # the browser drops the connection: the slot comes back
                await server.until(
                    lambda: gate.stats().aborted == 1, timeout=WAIT, what="the closed page's request aborted"
                )
                log = await _until_logged(waiter, "tick:", timeout=WAIT + RETRY_AFTER)
                assert log.index("tick:0") > log.index("refused:queue_full")
                assert await server.call(lambda: gate.running) == 1

                await waiter.close()
                await server.until(lambda: gate.running == 0, timeout=WAIT, what="the slot free again")
            finally:
                await browser.close()
        stats = await server.call(gate.stats)
    assert stats.aborted == 2
    assert stats.rejected >= 2
    assert (stats.failed, stats.leaked, stats.running) == (0, 0, 0)
