"""The docs site in a real browser: Debian's chromium, driven by Playwright, at two window widths.

The site is built (``mkdocs build --strict``) into a temporary directory and served on loopback.
On every page, at 1280 and 1920 pixels wide: a code block wider than the page scrolls, with a
scrollbar that takes room (Playwright hides scrollbars by default; here they are shown, as to a
reader), and no code in a table cell is broken over two lines. On the recipe pages no code block is
wider than the page at all: a recipe's every line is there to read and paste. Real time, looptime
off; every bound is a setting here.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.asgi.servers import chromium_binary, require

# The site is built from the sources (mkdocstrings reads src/ without importing it): the same on
# either build of the package, so the compiled pass leaves it out.
pytestmark = [pytest.mark.browser, pytest.mark.build_independent, pytest.mark.looptime(False)]

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (1280, 1920)
HEIGHT = 1000
LAUNCH = 60.0  # seconds chromium may take to start on a loaded machine (as tests/asgi/test_browser.py)
BUILD = 300.0  # seconds the site's build may take (about 4 on an idle machine)
#: Debian's chromium without what a test does not need (the sandbox needs privileges a container lacks).
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Per page: each code block's widths, its overflow and its scrollbar's height, and the table
#: cells' code that lies on more than one line.
MEASURE = """() => ({
  blocks: [...document.querySelectorAll('pre > code')].map(code => ({
    text: code.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''),
    scrollWidth: code.scrollWidth,
    clientWidth: code.clientWidth,
    overflowX: getComputedStyle(code).overflowX,
    scrollbar: code.offsetHeight - code.clientHeight,
  })),
  broken: [...document.querySelectorAll('.md-typeset table code')]
    .filter(code => code.getClientRects().length > 1)
    .map(code => code.textContent),
})"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with warnings as errors."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: it is in the docs group (make setup installs it)")
    where = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(where)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        timeout=BUILD,
    )
    return where


@pytest.fixture(scope="module")
def url(site: Path) -> Iterator[str]:
    """The site served on loopback, from a thread, until the module's tests are done."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs site")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _pages(site: Path) -> list[str]:
    return sorted(
        "" if page.parent == site else f"{page.parent.relative_to(site).as_posix()}/"
        for page in site.rglob("index.html")
        if "assets" not in page.relative_to(site).parts
    )


@pytest.fixture(scope="module")
def measured(site: Path, url: str) -> dict[tuple[int, str], dict[str, Any]]:
    """Every page's measures, by window width and path."""
    executable = chromium_binary()
    playwright_api = require(
        "playwright.async_api", "pip install playwright (its browser download is not used)"
    )

    async def measure() -> dict[tuple[int, str], dict[str, Any]]:
        found: dict[tuple[int, str], dict[str, Any]] = {}
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=executable,
                args=ARGS,
                ignore_default_args=["--hide-scrollbars"],
                timeout=LAUNCH * 1000,
            )
            try:
                for width in WIDTHS:
                    page = await browser.new_page(viewport={"width": width, "height": HEIGHT})
                    for path in _pages(site):
                        await page.goto(url + path)
                        found[width, path] = await page.evaluate(MEASURE)
                    await page.close()
            finally:
                await browser.close()
        return found

    return asyncio.run(measure())


def test_every_page_is_measured(site: Path, measured: dict[tuple[int, str], dict[str, Any]]) -> None:
    recipes = {f"recipes/{page.stem}/" for page in (ROOT / "docs" / "recipes").glob("*.md")}
    assert recipes <= set(_pages(site))
    assert len(measured) == len(WIDTHS) * len(_pages(site))


@pytest.mark.parametrize("width", WIDTHS)
def test_no_recipe_line_is_cut_off(width: int, measured: dict[tuple[int, str], dict[str, Any]]) -> None:
    cut = {
        path: [block["text"] for block in found["blocks"] if block["scrollWidth"] > block["clientWidth"]]
        for (at, path), found in measured.items()
        if at == width and path.startswith("recipes/")
    }
    assert len(cut) == len(list((ROOT / "docs" / "recipes").glob("*.md")))
    assert not any(cut.values()), cut


@pytest.mark.parametrize("width", WIDTHS)
def test_a_code_block_wider_than_the_page_scrolls_with_a_scrollbar(
    width: int, measured: dict[tuple[int, str], dict[str, Any]]
) -> None:
    hidden = {
        path: [
            block
            for block in found["blocks"]
            if block["scrollWidth"] > block["clientWidth"]
            and (block["overflowX"] not in ("auto", "scroll") or block["scrollbar"] < 8)
        ]
        for (at, path), found in measured.items()
        if at == width
    }
    assert not any(hidden.values()), hidden


@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_cell_breaks_its_code(width: int, measured: dict[tuple[int, str], dict[str, Any]]) -> None:
    broken = {
        path: found["broken"] for (at, path), found in measured.items() if at == width and found["broken"]
    }
    assert not broken, broken
