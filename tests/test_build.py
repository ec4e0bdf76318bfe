"""The two builds: ``boundedgate.COMPILED`` says which one runs, and the environment can pick the pure one."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import boundedgate

ROOT = str(Path(boundedgate.__file__).parent.parent)  # the boundedgate this suite tests, not another

REPORT = """
import json, sys
import boundedgate, boundedgate.sim
files = sorted(m.__file__ for n, m in sys.modules.items() if n.startswith("boundedgate.") and m.__file__)
print(json.dumps({"compiled": boundedgate.COMPILED, "files": files}))
"""


def _imported(**environ: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "BOUNDEDGATE_NO_EXTENSIONS"}
    env |= {"PYTHONPATH": ROOT, **environ}
    done = subprocess.run([sys.executable, "-c", REPORT], env=env, capture_output=True, text=True, check=True)
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_no_extensions_loads_every_module_from_its_source() -> None:
    report = _imported(BOUNDEDGATE_NO_EXTENSIONS="1")
    assert report["compiled"] is False
    files = report["files"]
    assert isinstance(files, list)
    assert len(files) > 20
    assert [f for f in files if not f.endswith(".py")] == []


def test_compiled_says_whether_the_core_was_loaded_compiled() -> None:
    state = sys.modules["boundedgate._core._state"].__file__
    assert state is not None
    assert boundedgate.COMPILED is (not state.endswith(".py"))
    for environ in ({}, {"BOUNDEDGATE_NO_EXTENSIONS": "0"}):  # unset, or 0: whichever is installed
        report = _imported(**environ)
        files = report["files"]
        assert isinstance(files, list)
        state = next(
            f for f in files if Path(f).parent.name == "_core" and Path(f).name.startswith("_state.")
        )
        assert report["compiled"] is (not state.endswith(".py")), environ


def test_the_wheel_is_pure_python_without_a_working_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    # The build hook, at the project's root (imported by name: it is not type-checked with the package).
    hatch_build = importlib.import_module("hatch_build")

    monkeypatch.delenv("BOUNDEDGATE_NO_EXTENSIONS", raising=False)
    monkeypatch.setenv("CC", "/bin/false")
    assert hatch_build.compiler_works() is not None
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert "no C compiler" in (hatch_build.compiler_works() or "")
    monkeypatch.setenv("BOUNDEDGATE_NO_EXTENSIONS", "1")
    assert hatch_build.disabled()
    monkeypatch.setenv("BOUNDEDGATE_NO_EXTENSIONS", "0")
    assert not hatch_build.disabled()


FREED = """
import asyncio, gc, weakref
from boundedgate import BoundedGate, KeyedGate, admit_all
from boundedgate.prometheus import GateCollector

gate = BoundedGate(max_running=1, max_waiting=0, name="freed")
told = []
ref = weakref.ref(gate, lambda _: told.append("ref"))
weakref.finalize(gate, told.append, "finalize")
proxy = weakref.proxy(gate)
other = BoundedGate(max_running=1, max_waiting=0, name="other")
keyed = KeyedGate(max_running=1, max_waiting=0, name="keyed")
collector = GateCollector(gate, other, keyed)


async def main():
    async with admit_all(gate, other, (keyed, "k")):  # the order graph holds all three weakly
        pass
    async with gate.admit():
        pass

asyncio.run(main())
del gate
gc.collect()
print(ref() is None, sorted(told), flush=True)
try:
    proxy.name
except ReferenceError:
    print("dead proxy")
print(sorted({s.labels["gate"] for m in collector.collect() for s in m.samples if "gate" in s.labels}))


async def again():  # the order graph unlinks the dead gate's node
    async with admit_all(other, (keyed, "k")):
        print("again")

asyncio.run(again())
"""


def test_a_weakly_referenced_gate_is_freed_with_its_weak_references_cleared() -> None:
    # Freed in a child process: a gate that left its weak references behind when it was freed
    # (as mypyc's deallocator of a native class does) crashes the process that touches them.
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", FREED], env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (
        0,
        "True ['finalize', 'ref']\ndead proxy\n['keyed', 'other']\nagain\n",
    ), done.stderr


KEYED_FREED = """
import asyncio, gc, weakref
from boundedgate import KeyedGate, admit_all

keyed = KeyedGate(max_running=1, max_waiting=0, name="keyed")
told = []
ref = weakref.ref(keyed, lambda _: told.append("ref"))
weakref.finalize(keyed, told.append, "finalize")
proxy = weakref.proxy(keyed)


async def main():
    async with keyed.admit("a"), admit_all((keyed, "b")):  # the order graph holds it weakly
        pass

asyncio.run(main())
del keyed
gc.collect()  # its keys' states hold it: a cycle
print(ref() is None, sorted(told), flush=True)
try:
    proxy.name
except ReferenceError:
    print("dead proxy")
"""


def test_a_weakly_referenced_keyed_gate_is_freed_with_its_weak_references_cleared() -> None:
    # As for the gate: the keyed gate's weak-reference slot is its interpreted class's, not its
    # compiled base's (KeyedBase), whose deallocator would leave them behind.
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, "-c", KEYED_FREED], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "True ['finalize', 'ref']\ndead proxy\n"), done.stderr
