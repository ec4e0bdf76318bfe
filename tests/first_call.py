"""The modules a path's first call imports, in a fresh interpreter: what a first request pays alone.

A first call that imports a module (anyio's backend, a codec, a parser) is slower than every later
one by that import, which can be a hundred milliseconds; a test of the time would depend on the
machine, a test of ``sys.modules`` does not. :func:`first_call_imports` runs a script in a new
process of this interpreter (with this process's environment, so the build under test), lets it
import and set up what it needs, then runs the path once on a real event loop and reports the
modules that appeared during that call.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import boundedgate

__all__ = ("first_call_imports",)

_SCRIPT = """\
import asyncio, json, sys
import boundedgate
{imports}

async def main():
{setup}
    before = set(sys.modules)
{first}
    return sorted(set(sys.modules) - before)

print(json.dumps({{"compiled": boundedgate.COMPILED, "new": {run}}}))
"""


def first_call_imports(
    first: str, *, setup: str = "", imports: str = "", run: str = "asyncio.run(main())"
) -> list[str]:
    """The modules that running ``first`` imported, after ``imports`` and ``setup``, in a new process.

    Args:
        first: The first call, the body of an ``async def`` (it may ``await``).
        setup: What comes before it in that function: making the gate, warming a third party's
            client with a request of its own (so its own first-call imports are not counted).
        imports: Module-level code run before (the extra's module, helpers).
        run: What runs ``main``: ``asyncio.run(main())``, or ``anyio.run(main)`` (then ``imports``
            imports anyio).
    """
    body = {"setup": setup or "pass", "first": first}
    script = _SCRIPT.format(
        imports=textwrap.dedent(imports).strip("\n"),
        run=run,
        **{k: textwrap.indent(textwrap.dedent(v).strip("\n"), "    ") for k, v in body.items()},
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["compiled"] is boundedgate.COMPILED  # the child ran the build under test
    new: list[str] = report["new"]
    return new
