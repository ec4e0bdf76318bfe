"""The README's FastAPI recipe, as a user pastes it, served by uvicorn and called by the openai SDK.

tests/test_docs.py only runs the block (it defines the app); here the app it defines is served for
real, with the fake provider behind it and the real openai SDK in front, in real time.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.asgi.servers import require, served
from tests.fake_provider import Behaviour, fake_provider

pytestmark = [pytest.mark.http_server, pytest.mark.looptime(False)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RECIPE_PAGE = ROOT / "docs" / "recipes" / "fastapi.md"
WAIT = 10.0


def _recipe(page: Path = README) -> str:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
    (recipe,) = [block for block in blocks if "GateMiddleware" in block and "FastAPI(" in block]
    assert len(recipe.splitlines()) < 45  # a recipe under 45 lines, typed (mypy --strict passes it)
    return str(recipe)


def test_the_recipe_page_serves_the_readme_s_recipe() -> None:
    assert _recipe(RECIPE_PAGE) == _recipe()  # what is tested here is what both show


async def test_the_readme_recipe_serves_streams_and_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)  # where the recipe's log handler writes (a server's stderr)
    openai = require("openai", "pip install 'boundedgate[test]'")
    httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
    require("fastapi", "pip install 'boundedgate[test]'")
    recipe = _recipe()

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, Any]]:
        async with fake_provider(Behaviour(chunks=3, hold_after=1)) as provider:
            monkeypatch.setenv("OPENAI_BASE_URL", provider.openai_url)
            monkeypatch.setenv("OPENAI_API_KEY", "test")
            namespace: dict[str, Any] = {"__name__": "recipe"}
            exec(compile(recipe, "README.md", "exec"), namespace)
            try:
                yield namespace["app"], (namespace["gate"], provider)
            finally:
                await namespace["client"].close()

    with served(build, limit=60) as server:
        gate, provider = server.parts
        async with (
            openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0, timeout=WAIT) as sdk,
            httpx2.AsyncClient(timeout=WAIT) as http,
        ):
            streams = [
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                for _ in range(2)
            ]
            await server.until(lambda: provider.streaming == 2, timeout=WAIT, what="two provider streams")
            assert await server.call(lambda: gate.running) == 2
            limits = json.loads((await http.get(f"{server.url}/limits")).content)
            health = (await http.get(f"{server.url}/healthz")).json()
            await server.call(lambda: gate.set_limits(max_running=2, max_waiting=0))
            with pytest.raises(openai.InternalServerError) as refused:
                await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            await server.call(provider.release)
            texts = []
            for stream in streams:
                texts.append("".join([c.choices[0].delta.content or "" async for c in stream if c.choices]))
            await server.until(lambda: gate.running == 0, timeout=WAIT, what="the slots back")
            stats = await server.call(gate.stats)
    assert texts == ["tok0 tok1 tok2 "] * 2
    assert health == {"ok": True}
    assert limits["limits"]["openai"]["max_pending"] == 150
    assert (stats.completed, stats.failed, stats.rejected) == (2, 0, 1)
    assert refused.value.code == "queue_full"
    # The recipe's logging lines put the refusal in the server's log, where uvicorn's own go.
    assert "openai: request rejected at once" in log.getvalue()
