"""Every code block of the README and the docs type-checks with ``mypy --strict``, as a user's module.

A reader pastes a block into a project that runs ``mypy --strict``; it must pass there, against the
real httpx, httpx2, starlette, fastapi, openai and anthropic. Each ```` ```python ```` block is
written to a directory of its own as a module, and mypy checks them all in one run (sharing its
cache with ``test_sdk_helpers.py``). A ```` ```py ```` fragment is checked too: as it is when it is a
module on its own, else after the preamble of what it assumes (``FRAGMENTS``), or it is listed in
``UNCHECKED`` with the reason it cannot be.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.test_docs import PAGES, ROOT

# mypy reads the sources (MYPYPATH), whichever build the suite imports; it shares its cache with
# test_sdk_helpers.py, so the two run on one worker of pytest-xdist, one after the other.
pytestmark = [pytest.mark.build_independent, pytest.mark.xdist_group("mypy-typed")]

#: Errors that the library's own types cause today, each with where that is being fixed. A block may
#: report these and nothing else; once none reports one, its entry must go (the test says so).
KNOWN: dict[str, str] = {}


#: What a fragment assumes, by a line of it: the preamble that defines it (its imports, and the
#: objects it uses as parameters of a function), and whether its lines are that function's body.
FRAGMENTS: dict[str, tuple[str, bool]] = {
    'await gate.signal("overloaded")': (
        """\
        import redis.asyncio

        from boundedgate import Adaptive
        from boundedgate.httpx import GatedTransport, follow_provider
        from boundedgate.redis import RedisGate


        async def fragment(client: redis.asyncio.Redis) -> None:
        """,
        True,
    ),
}

#: Fragments that are not code, by a line of them, and why.
UNCHECKED: dict[str, str] = {
    "async def chat(...):": "a sketch of a route: `...` stands for its parameters",
}


@dataclass(frozen=True)
class Block:
    """One block of a page, as the module mypy checks."""

    id: str  # page:n, as tests/test_docs.py names the python blocks (page:py-n for a fragment)
    module: str
    source: str
    offset: int  # lines of preamble before the block's first line


def _fragment_source(page: str, text: str) -> tuple[str, int] | None:
    if any(line in text for line in UNCHECKED):
        return None
    for line, (preamble, body) in FRAGMENTS.items():
        if line in text:
            head = textwrap.dedent(preamble)
            code = textwrap.indent(text, "    ") if body else text
            return head + code, head.count("\n")
    try:
        ast.parse(text)
    except SyntaxError as error:
        pytest.fail(f"a fragment of {page} is not a module ({error}): give it a preamble in FRAGMENTS")
    return text, 0


def _blocks() -> list[Block]:
    blocks = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        slug = re.sub(r"\W", "_", name.removesuffix(".md")).lower()
        text = page.read_text(encoding="utf-8")
        for n, source in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL), start=1):
            blocks.append(Block(f"{name}:{n}", f"block_{slug}_{n}", source, 0))
        for n, fragment in enumerate(re.findall(r"```py\n(.*?)```", text, flags=re.DOTALL), start=1):
            made = _fragment_source(name, fragment)
            if made is not None:
                blocks.append(Block(f"{name}:py-{n}", f"fragment_{slug}_{n}", *made))
    return blocks


BLOCKS = _blocks()


def test_blocks_of_both_kinds_are_checked() -> None:
    ids = {block.id for block in BLOCKS}
    assert "README.md:1" in ids
    assert any(":py-" in block_id for block_id in ids)


@pytest.fixture(scope="module")
def reported(
    tmp_path_factory: pytest.TempPathFactory, strict_mypy: Callable[..., str]
) -> dict[str, list[str]]:
    """mypy's errors, by module: ``line: message``, the line counted in the block."""
    where = tmp_path_factory.mktemp("doc-blocks")
    for block in BLOCKS:
        (where / f"{block.module}.py").write_text(block.source, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(where)
        out = strict_mypy(*(f"{b.module}.py" for b in BLOCKS))
    offsets = {block.module: block.offset for block in BLOCKS}
    errors: dict[str, list[str]] = {block.module: [] for block in BLOCKS}
    for line in out.splitlines():
        found = re.match(r"^(\w+)\.py:(\d+): error: (.*)$", line)
        if found:
            module, number, message = found.groups()
            errors[module].append(f"{int(number) - offsets[module]}: {message}")
    return errors


def _unknown(errors: list[str]) -> list[str]:
    return [error for error in errors if not any(known in error for known in KNOWN)]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_every_block_type_checks(block: Block, reported: dict[str, list[str]]) -> None:
    unknown = _unknown(reported[block.module])
    assert not unknown, "\n".join([block.id, *unknown])


def test_every_known_error_is_still_reported(reported: dict[str, list[str]]) -> None:
    every = [error for errors in reported.values() for error in errors]
    for known, why in KNOWN.items():
        assert any(known in error for error in every), f"fixed ({why}): remove it from KNOWN"
