"""Capacity planning: replay traffic through a gate's own decision core, in virtual time.

The simulator is not a model of :class:`~boundedgate.BoundedGate`: it feeds the same decision core
the asyncio driver uses, playing the event loop's part itself, so every request ends exactly as it
would in production with the same settings and the same service times. A script of a hundred
thousand requests replays in seconds, with no asyncio and no sleeping. Requests that name a key go
through that key's own gate, as through a :class:`~boundedgate.KeyedGate`, and the summary gives a
:class:`KeySummary` per key.

::

    from boundedgate.sim import Job, simulate

    jobs = [Job("A", 0, 100, 300), Job("B", 0, 100, 300), Job("C", 0, 50, 200)]
    result = simulate(jobs, max_running=2, max_waiting=2)
    print(result.summary.end_to_end_ms.p99)

The command line (``python -m boundedgate simulate|plan``) is built on this package.
"""

from ._compare import Comparison, Contender, compare_admission
from ._engine import simulate
from ._plan import SweepRow, sweep
from ._provider import Client, ClientResult, Provider, Request, drift, simulate_provider, steps
from ._recorder import Recorder
from ._results import (
    ClassSummary,
    KeySummary,
    Percentiles,
    RequestResult,
    Simulation,
    Summary,
    TraceEvent,
)
from ._script import Job, ScriptError, parse_script, read_script, write_script
from ._workload import Bursts, Exponential, Fixed, LogNormal, Poisson, generate

__all__ = (
    "Bursts",
    "ClassSummary",
    "Client",
    "ClientResult",
    "Comparison",
    "Contender",
    "Exponential",
    "Fixed",
    "Job",
    "KeySummary",
    "LogNormal",
    "Percentiles",
    "Poisson",
    "Provider",
    "Recorder",
    "Request",
    "RequestResult",
    "ScriptError",
    "Simulation",
    "Summary",
    "SweepRow",
    "TraceEvent",
    "compare_admission",
    "drift",
    "generate",
    "parse_script",
    "read_script",
    "simulate",
    "simulate_provider",
    "steps",
    "sweep",
    "write_script",
)

for _name in __all__:
    globals()[_name].__module__ = "boundedgate.sim"
del _name
