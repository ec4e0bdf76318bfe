"""The command line: ``boundedgate simulate`` and ``boundedgate plan`` (also ``python -m boundedgate``).

``simulate`` replays a script (JSON or CSV, see :mod:`boundedgate.sim`) through a gate with given
settings and prints what became of each request. ``plan`` generates traffic (or reads a script) and
sweeps settings, printing a line per setting. Both take rate limits as ``--rpm`` (requests per
minute) and ``--tpm`` (tokens per minute, paid by each request's cost), and replay requests with a
key through a gate per key, with ``--override KEY=C,Q`` for a key's own limits. ``plan --provider K``
instead compares ways of admitting on the traffic against a provider of capacity K (see ``_compare``).
Exit status: 0 on success, 1 when the work could not be done (an unreadable or invalid script, a
missing extra), 2 for a malformed command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from .._core import GateLimits, RateLimit
from ..sim import (
    Bursts,
    Job,
    Poisson,
    ScriptError,
    SweepRow,
    generate,
    read_script,
    simulate,
    sweep,
    write_script,
)
from ..sim._plot import FORMATS, plot_simulation, plot_sweep, require_matplotlib
from ..sim._results import overrides_dict, rate_limit_dict
from ..sim._text import human_ms, key_name, printable, requests_table, summary_lines, sweep_table, trace_table
from ..sim._workload import MAX_REQUESTS, Arrivals, Distribution, Exponential, Fixed
from . import _compare, _units
from ._progress import ProgressBar

__all__ = ("main",)

_BY_DEADLINE = "start each class's waiters earliest deadline first, not in arrival order"


class _Failed(Exception):
    """The command could not do its work; the message says why."""


def _one_running(text: str) -> int | None:
    values = _units.running_limits(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one number (plan sweeps several)")
    return values[0]


def _max_waiting(text: str) -> int | None:
    values = _units.limits(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one number (plan sweeps several)")
    return values[0]


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: jump_share is a number >= 0 and < 1")
    return value


def _weights(text: str) -> list[float]:
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        weights = []
    if not weights or not all(w >= 0 and math.isfinite(w) for w in weights) or not sum(weights) > 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a weight >= 0 per priority class, e.g. 1,4 (one request in five is class 0)"
        )
    return weights


def _add_priority_options(group: Any) -> None:
    group.add_argument(
        "--priorities",
        metavar="N",
        type=_units.whole_number("--priorities"),
        help="priority classes (default: enough for the script's priority column)",
    )
    group.add_argument(
        "--jump-share",
        metavar="F",
        type=_share,
        default=0.2,
        help="share of starts that may jump ahead of an older waiter (default 0.2)",
    )


def _add_rate_limit_options(group: Any, several: bool) -> None:
    kind = _units.quotas if several else _units.amount
    more = ", or several to try: 30,60,none" if several else ""
    provider = "; with --provider, the provider's own quota (one number)" if several else ""
    group.add_argument(
        "--rpm", metavar="N,..." if several else "N", type=kind, help=f"requests per minute{more}{provider}"
    )
    group.add_argument(
        "--rpm-burst",
        metavar="B",
        type=_units.amount,
        help="the most requests the rpm limit lets through at once (default: one minute's quota)",
    )
    group.add_argument(
        "--tpm",
        metavar="N,..." if several else "N",
        type=kind,
        help=f"tokens per minute, paid by each request's cost{more}",
    )
    group.add_argument(
        "--tpm-burst",
        metavar="B",
        type=_units.amount,
        help="the most tokens the tpm limit lets through at once (default: one minute's quota)",
    )


def _add_override_option(group: Any) -> None:
    group.add_argument(
        "--override",
        metavar="KEY=C,Q",
        type=_units.override,
        action="append",
        default=[],
        help="a key's own running slots and queue places (each a number or none), as KeyedGate's "
        "overrides; repeat for more keys",
    )


def _overrides(args: argparse.Namespace, jobs: Sequence[Job]) -> dict[str, GateLimits]:
    overrides: dict[str, GateLimits] = {}
    for key, limits in args.override:
        if key in overrides:
            raise _Failed(f"--override: key {key!r} is given twice")
        overrides[key] = limits
    keys = {job.key for job in jobs}
    for key in overrides:
        if key not in keys:
            print(f"boundedgate: note: --override {key}=...: no request has the key {key!r}", file=sys.stderr)
    return overrides


def _limits_text(max_running: int | None, max_waiting: int | None) -> str:
    c = "none" if max_running is None else max_running
    q = "none" if max_waiting is None else max_waiting
    return f"max_running={c}, max_waiting={q}"


def _overrides_text(overrides: Mapping[str, GateLimits]) -> list[str]:
    return [f"{key_name(key)}: {_limits_text(*limits)}" for key, limits in overrides.items()]


def _given(value: float) -> str:
    """A number the command line was given, as it was given: ``60``, ``0.5``, ``1e-300``."""
    text = repr(value)
    return text.removesuffix(".0")


def _rate_limits(
    rpm: float | None, tpm: float | None, rpm_burst: float | None, tpm_burst: float | None
) -> list[RateLimit]:
    limits = []
    try:
        if rpm is not None:
            limits.append(RateLimit.per_minute(rpm, burst=rpm_burst, name=f"{_given(rpm)} rpm"))
        if tpm is not None:
            tokens = RateLimit.per_minute(tpm, burst=tpm_burst, unit="tokens", name=f"{_given(tpm)} tpm")
            limits.append(tokens)
    except ValueError as error:
        raise _Failed(f"--rpm/--tpm: {error}") from None
    return limits


def _note_costless(limits: Sequence[RateLimit], jobs: Sequence[Job]) -> None:
    if any(not limit.per_request for limit in limits) and not any(
        job.cost or job.actual_cost for job in jobs
    ):
        print(
            "boundedgate: note: --tpm is set, but no request has a cost or an actual_cost: "
            "each pays 0 tokens",
            file=sys.stderr,
        )


def _classes(args: argparse.Namespace, jobs: Sequence[Job]) -> int:
    if args.priorities is not None:
        return int(args.priorities)
    return max((job.priority for job in jobs), default=0) + 1


def _settings(
    max_running: int | None,
    max_waiting: int | None,
    classes: int,
    jump_share: float,
    limits: Sequence[RateLimit] = (),
    keys: int = 1,
    overrides: Mapping[str, GateLimits] | None = None,
) -> str:
    text = _limits_text(max_running, max_waiting)
    if classes > 1:
        text += f", priorities={classes}, jump_share={jump_share:g}"
    for limit in limits:
        text += f", {limit.name} (burst {_given(limit.burst)})"
    if keys > 1:
        text += f", for each of {keys} keys"
    return "; ".join([text, *_overrides_text(overrides or {})])


def _add_ignore_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--ignore-unknown-columns",
        action="store_true",
        help="skip columns that are not a script's (an export's own fields) instead of refusing them",
    )


def _plot_path(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() not in FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: a chart is saved as {', '.join(FORMATS)}")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundedgate",
        description="Check a gate's settings against traffic before they ship: the gate's own decision "
        "core, replayed in virtual time.",
    )
    parser.add_argument("--version", action="version", version=f"boundedgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_simulate(commands)
    _add_plan(commands)
    return parser


def _add_simulate(commands: Any) -> None:
    sim = commands.add_parser(
        "simulate",
        help="replay a script of requests through a gate",
        description="Replay a script (JSON or CSV with id, arrival_ms, service_ms and an optional "
        "budget_ms, in whole milliseconds, and optionally priority, cost, actual_cost, key and "
        "max_wait_ms) through a "
        "gate (a gate per key, with --override for a key's own limits), and print what became of each "
        "request.",
    )
    sim.add_argument("script", metavar="FILE", type=Path, help="the script, .json or .csv")
    sim.add_argument(
        "--max-running",
        "-c",
        metavar="C",
        type=_one_running,
        required=True,
        help="running slots, or none (a pure rate limiter)",
    )
    sim.add_argument(
        "--max-waiting", "-q", metavar="Q", type=_max_waiting, required=True, help="queue places, or none"
    )
    sim.add_argument(
        "--feasible",
        action="store_true",
        help="deadline-feasible admission: refuse at arrival what the recent pace says cannot be in time",
    )
    sim.add_argument("--by-deadline", action="store_true", help=_BY_DEADLINE)
    _add_override_option(sim)
    _add_priority_options(sim)
    _add_rate_limit_options(sim, several=False)
    sim.add_argument("--json", action="store_true", help="print the result as JSON")
    sim.add_argument("--trace", action="store_true", help="also print every event")
    sim.add_argument("--summary-only", action="store_true", help="print the summary alone")
    sim.add_argument(
        "--requests",
        action="store_true",
        help=f"print each request even for a script of more than {LONG_SCRIPT} (default: the summary alone)",
    )
    _add_ignore_option(sim)
    sim.add_argument(
        "--plot", metavar="FILE", type=_plot_path, help="draw running/waiting over time (.svg, .png)"
    )


def _add_plan(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="sweep settings against generated traffic or a script",
        description="Generate traffic (Poisson arrivals at --rate, --burst, or both) or read a --script, "
        "simulate it under each setting, and print a line per setting; with --provider, compare ways of "
        "admitting on it against a provider instead. Durations take a unit: 250ms, 2s, 5m.",
    )
    traffic = plan.add_argument_group("traffic")
    _add_arrival_options(traffic)
    settings = plan.add_argument_group("settings")
    _add_limit_options(settings)
    # The mixes and costs are traffic options added after the settings' first ones: the usage
    # line lists the options in the order they were added.
    _add_mix_options(traffic)
    _add_override_option(settings)
    _add_priority_options(settings)
    _add_rate_limit_options(settings, several=True)
    _compare.add_options(plan)
    plan.add_argument("--json", action="store_true", help="print the result as JSON")
    plan.add_argument(
        "--plot",
        metavar="FILE",
        type=_plot_path,
        help="draw the sweep's curves, or with --provider C against K and the goodput over time (.svg, .png)",
    )
    plan.add_argument(
        "--save-script", metavar="FILE", type=Path, help="write the generated traffic as a script"
    )


def _add_arrival_options(traffic: Any) -> None:
    traffic.add_argument(
        "--script", metavar="FILE", type=Path, help="replay this script instead of generating"
    )
    _add_ignore_option(traffic)
    traffic.add_argument("--rate", type=_units.rate, help="Poisson arrivals: 20 (per second), 20/s, 1200/m")
    traffic.add_argument(
        "--burst", metavar="N", type=_units.whole_number("--burst"), help="N requests arriving at one instant"
    )
    traffic.add_argument(
        "--burst-at", metavar="T", type=_units.whole_duration_ms, help="the first burst (default 0)"
    )
    traffic.add_argument(
        "--burst-every", metavar="P", type=_units.whole_duration_ms, help="repeat bursts every P"
    )
    traffic.add_argument(
        "--service",
        type=_units.distribution,
        help="service time: 2s, exp:2s (mean), lognormal:2s,20s (mean, p99)",
    )
    traffic.add_argument(
        "--prompt-tokens",
        metavar="TOKENS",
        type=_units.cost,
        help="instead of --service, with --output-tokens: each request's prompt size, e.g. "
        "lognormal:1500,12000 (the service time follows: see --prefill)",
    )
    traffic.add_argument(
        "--output-tokens",
        metavar="TOKENS",
        type=_units.cost,
        help="and its answer's size, e.g. lognormal:250,1200 (see --decode)",
    )
    traffic.add_argument(
        "--budget",
        type=_units.optional_duration_ms,
        default=None,
        help="each request's budget from arrival, or none (the default)",
    )
    traffic.add_argument(
        "--duration",
        type=_units.whole_duration_ms,
        default=600_000,
        help="arrivals fall in [0, D) (default 10m)",
    )
    traffic.add_argument("--seed", type=int, default=0, help="the random seed (default 0)")


def _add_limit_options(settings: Any) -> None:
    settings.add_argument(
        "--max-running",
        "-c",
        metavar="C,...",
        type=_units.running_limits,
        required=True,
        help="running slots to try, or none",
    )
    settings.add_argument(
        "--max-waiting",
        "-q",
        metavar="Q,...",
        type=_units.limits,
        required=True,
        help="queue places to try, e.g. 0,10,50,none",
    )
    settings.add_argument(
        "--feasible",
        action="store_true",
        help="deadline-feasible admission: refuse at arrival what the recent pace says cannot be in time",
    )
    settings.add_argument("--by-deadline", action="store_true", help=_BY_DEADLINE)


def _add_mix_options(traffic: Any) -> None:
    traffic.add_argument(
        "--priority-mix",
        metavar="W,...",
        type=_weights,
        help="weights of the priority classes 0, 1...: 1,4 makes one request in five class 0",
    )
    traffic.add_argument(
        "--key-mix",
        metavar="KEY=W,...",
        type=_units.key_mix,
        help="spread requests over keys by weight: acme=3,globex=1 makes three in four acme's",
    )
    traffic.add_argument(
        "--cost",
        type=_units.cost,
        help="each request's declared cost in tokens, for --tpm: 2000, exp:2000, lognormal:1200,6000",
    )
    traffic.add_argument(
        "--actual-cost",
        metavar="COST",
        type=_units.cost,
        help="the cost each request settles as it ends (the difference is charged or refunded)",
    )


def _describe_distribution(d: Distribution, unit: Callable[[float], str] = human_ms) -> str:
    if isinstance(d, Fixed):
        return unit(d.ms)
    if isinstance(d, Exponential):
        return f"exponential, mean {unit(d.mean_ms)}"
    return f"lognormal, mean {unit(d.mean_ms)}, p99 {unit(d.p99_ms)}"


def _can_plot(args: argparse.Namespace) -> bool:
    """Whether the chart asked for can be drawn; if not, the tables are printed and the end says why."""
    if not args.plot:
        return False
    try:
        require_matplotlib()
    except ImportError as error:
        args.no_chart = str(error)
        return False
    return True


def _read(path: Path, ignore_unknown: bool = False) -> list[Job]:
    try:
        return read_script(path, ignore_unknown=ignore_unknown)
    except OSError as error:
        raise _Failed(f"cannot read {path}: {error.strerror or error}") from None
    except ScriptError as error:
        raise _Failed(str(error)) from None


#: A script longer than this prints its summary alone, unless --requests asks for every request.
LONG_SCRIPT = 50


def _simulate(args: argparse.Namespace) -> None:
    plotting = _can_plot(args)
    jobs = _read(args.script, args.ignore_unknown_columns)
    classes = _classes(args, jobs)
    limits = _rate_limits(args.rpm, args.tpm, args.rpm_burst, args.tpm_burst)
    _note_costless(limits, jobs)
    overrides = _overrides(args, jobs)
    try:
        result = simulate(
            jobs,
            max_running=args.max_running,
            max_waiting=args.max_waiting,
            priorities=classes,
            jump_share=args.jump_share,
            rate_limits=limits,
            overrides=overrides,
            feasible=args.feasible,
            by_deadline=args.by_deadline,
        )
    except ScriptError as error:
        raise _Failed(f"{args.script}: {error}") from None
    except ValueError as error:
        raise _Failed(str(error)) from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        keys = len({job.key for job in jobs})
        settings = _settings(
            args.max_running, args.max_waiting, classes, args.jump_share, limits, keys, overrides
        )
        print(f"{len(jobs)} requests from {args.script} through {settings}")
        long = len(jobs) > LONG_SCRIPT and not (args.requests or args.trace)
        if not (args.summary_only or long):
            print("\n" + requests_table(result) + "\n\n(times in ms from the script's origin)")
            if args.trace:
                print("\n" + trace_table(result))
        print()
        print("\n".join(summary_lines(result.summary, rate_limits=bool(limits))))
        if long and not args.summary_only:
            shown = f"the summary alone, for {len(jobs)} requests"
            print(f"\n({shown}: --requests prints each one, --trace every event)")
    if plotting:
        plot_simulation(result, args.plot)
        print(f"\nchart: {args.plot}", file=sys.stderr)


def _plan_traffic(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[list[Job], str]:
    """The traffic to plan with, read from ``--script`` or generated, and how to describe it."""
    options = ("rate", "burst", "service", "budget", "priority_mix", "key_mix", "cost", "actual_cost")
    sized = ("prompt_tokens", "output_tokens")
    generated = [name for name in (*options, *sized) if getattr(args, name) is not None]
    if args.script is not None:
        if generated:
            parser.error(f"--script replays a script; it takes no --{generated[0].replace('_', '-')}")
        jobs = _read(args.script, args.ignore_unknown_columns)
        return jobs, f"{len(jobs)} requests from {args.script}"
    if args.rate is None and args.burst is None:
        parser.error("give --rate and/or --burst (or a --script)")
    sizes = (args.prompt_tokens, args.output_tokens)
    if args.service is None and None in sizes:
        parser.error(
            "give --service: 2s, exp:2s (the mean) or lognormal:2s,20s (mean and p99); or the sizes, "
            "--prompt-tokens and --output-tokens"
        )
    if args.service is not None and sizes != (None, None):
        parser.error("give --service or the sizes (--prompt-tokens and --output-tokens), not both")
    if args.burst is None and (args.burst_at is not None or args.burst_every is not None):
        parser.error("--burst-at and --burst-every need --burst")
    arrivals, described = _arrivals(args)
    count = sum(process.expected(args.duration) for process in arrivals)
    if count > MAX_REQUESTS:
        about = "about " if args.rate is not None else ""
        parser.error(
            f"{' + '.join(described)} for {human_ms(args.duration)} would make {about}{count:,.0f} requests; "
            f"plan generates at most {MAX_REQUESTS:,}: lower --rate, --burst or --duration, "
            "or raise --burst-every"
        )
    try:
        jobs = generate(
            arrivals,
            args.service,
            duration_ms=args.duration,
            budget_ms=args.budget,
            priority_mix=args.priority_mix,
            key_mix=args.key_mix,
            cost=_fixed_or_drawn(args.cost),
            actual_cost=_fixed_or_drawn(args.actual_cost),
            prompt_tokens=args.prompt_tokens,
            output_tokens=args.output_tokens,
            speeds=None if args.provider is None else _compare.provider_of(args),
            seed=args.seed,
        )
    except ValueError as error:  # what the options above did not already refuse
        parser.error(str(error))
    return jobs, _workload(args, jobs, described)


def _arrivals(args: argparse.Namespace) -> tuple[list[Arrivals], list[str]]:
    """The arrival processes the options ask for, and a description of each."""
    arrivals: list[Arrivals] = []
    described: list[str] = []
    if args.rate is not None:
        arrivals.append(Poisson(args.rate))
        described.append(f"Poisson {args.rate:g}/s")
    if args.burst is not None:
        arrivals.append(Bursts(args.burst, start_ms=args.burst_at or 0, every_ms=args.burst_every))
        when = f"at {human_ms(args.burst_at or 0)}"
        if args.burst_every is not None:
            when += f" and every {human_ms(args.burst_every)}"
        described.append(f"bursts of {args.burst} {when}")
    return arrivals, described


def _workload(args: argparse.Namespace, jobs: Sequence[Job], described: Sequence[str]) -> str:
    """What the generated traffic is, in a line: arrivals, service, budget, mixes, costs, seed."""
    budget = "none" if args.budget is None else human_ms(args.budget)
    mix = (
        "" if args.priority_mix is None else f"; priority mix {','.join(f'{w:g}' for w in args.priority_mix)}"
    )
    if args.key_mix is not None:
        mix += f"; key mix {','.join(f'{printable(key)}={w:g}' for key, w in args.key_mix.items())}"
    costs = ""
    if args.cost is not None:
        costs += f"; cost {_describe_distribution(args.cost, _tokens)}"
    if args.actual_cost is not None:
        costs += f"; settles {_describe_distribution(args.actual_cost, _tokens)}"
    if args.service is not None:
        service = f"service {_describe_distribution(args.service)}"
    else:
        service = (
            f"prompts {_describe_distribution(args.prompt_tokens, _tokens)}; "
            f"outputs {_describe_distribution(args.output_tokens, _tokens)}"
        )
    return (
        f"{len(jobs)} requests in {human_ms(args.duration)} ({' + '.join(described)}); "
        f"{service}; budget {budget}{mix}{costs}; seed {args.seed}"
    )


def _tokens(value: float) -> str:
    return f"{_given(value)} tokens"


def _fixed_or_drawn(value: Distribution | None) -> float | Distribution | None:
    # A fixed cost is a number, so that the script holds it as given.
    if isinstance(value, Fixed):
        return int(value.ms) if value.ms == int(value.ms) else value.ms
    return value


def _plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    _compare.check_options(args, parser)
    plotting = _can_plot(args)
    jobs, description = _plan_traffic(args, parser)
    if args.save_script is not None:
        try:
            write_script(jobs, args.save_script)
        except OSError as error:
            raise _Failed(f"cannot write {args.save_script}: {error.strerror or error}") from None
    if args.provider is not None:
        _compare.compare(args, parser, jobs, description, plotting)
        return
    classes = _classes(args, jobs)
    overrides, rows = _sweep(args, jobs, classes)
    if args.json:
        print(json.dumps(_sweep_dict(args, description, classes, overrides, rows), indent=1))
    else:
        _print_sweep(args, jobs, description, classes, overrides, rows)
    if plotting:
        plot_sweep(rows, args.plot, title=description if len(description) < 100 else None)
        print(f"\nchart: {args.plot}", file=sys.stderr)


def _sweep(
    args: argparse.Namespace, jobs: Sequence[Job], classes: int
) -> tuple[dict[str, GateLimits], list[SweepRow]]:
    """The overrides, and a row per setting the options ask to try (rate limits: each rpm x tpm)."""
    limit_sets = [
        _rate_limits(rpm, tpm, args.rpm_burst, args.tpm_burst)
        for rpm in args.rpm or [None]
        for tpm in args.tpm or [None]
    ]
    _note_costless([limit for limits in limit_sets for limit in limits], jobs)
    overrides = _overrides(args, jobs)
    try:
        rows = sweep(
            jobs,
            max_running=args.max_running,
            max_waiting=args.max_waiting,
            priorities=classes,
            jump_share=args.jump_share,
            rate_limits=limit_sets,
            overrides=overrides,
            progress=ProgressBar("simulating", sys.stderr),
            feasible=args.feasible,
            by_deadline=args.by_deadline,
        )
    except ScriptError as error:
        raise _Failed(str(error)) from None
    except ValueError as error:
        raise _Failed(str(error)) from None
    return overrides, rows


def _sweep_dict(
    args: argparse.Namespace,
    description: str,
    classes: int,
    overrides: Mapping[str, GateLimits],
    rows: Sequence[SweepRow],
) -> dict[str, Any]:
    """The sweep as ``plan --json`` prints it."""
    return {
        "workload": description,
        "priorities": classes,
        "jump_share": args.jump_share,
        **({"overrides": overrides_dict(overrides)} if overrides else {}),
        "rows": [
            {
                "max_running": row.max_running,
                "max_waiting": row.max_waiting,
                "rate_limits": [rate_limit_dict(limit) for limit in row.rate_limits],
                "summary": row.summary.to_dict(),
            }
            for row in rows
        ],
    }


def _print_sweep(
    args: argparse.Namespace,
    jobs: Sequence[Job],
    description: str,
    classes: int,
    overrides: Mapping[str, GateLimits],
    rows: Sequence[SweepRow],
) -> None:
    """The sweep as ``plan`` prints it: the workload, the gate's other settings, the table."""
    print(f"Workload: {description}")
    gate = _gate_settings(args, jobs, classes, overrides)
    if gate:
        print(f"Gate: {'; '.join(gate)}")
    print()
    print(sweep_table(rows))
    print("\n(shares of all requests; wait = queue time of the requests that queued, p99)")
    if rows[0].summary.keys:
        print("(settings are each key's, but for overrides; --json gives each key's summary)")


def _gate_settings(
    args: argparse.Namespace, jobs: Sequence[Job], classes: int, overrides: Mapping[str, GateLimits]
) -> list[str]:
    """The settings every row shares: classes, keys, overrides, rate limit bursts."""
    gate = []
    if classes > 1:
        gate.append(f"priorities={classes}, jump_share={args.jump_share:g}")
    keys = len({job.key for job in jobs})
    if keys > 1:
        gate.append(f"a gate per key ({keys} keys)")
    gate += _overrides_text(overrides)
    for kind, given, burst in (("rpm", args.rpm, args.rpm_burst), ("tpm", args.tpm, args.tpm_burst)):
        if any(value is not None for value in given or ()):
            size = _given(burst) if burst else "of a minute's quota"
            gate.append(f"{kind} burst {size}")
    return gate


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: the process's arguments).

    Args:
        argv: The arguments, without the program name.

    Returns:
        The exit status: 0 on success, 1 when the work could not be done.

    Raises:
        SystemExit: On a malformed command line (status 2), and for ``--help`` and ``--version``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    for kind in ("rpm", "tpm"):
        if getattr(args, f"{kind}_burst") is not None and getattr(args, kind) is None:
            parser.error(f"--{kind}-burst needs --{kind}")
    try:
        if args.command == "simulate":
            _simulate(args)
        else:
            _plan(args, parser)
    except _Failed as error:
        print(f"boundedgate: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader left (`boundedgate simulate big.csv | head`): stop quietly, and keep Python's
        # own flush at exit from raising again (the recipe in the signal module's documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if getattr(args, "no_chart", None):
        # The tables are printed; the chart asked for is not, and the run says so and fails.
        print(f"boundedgate: no chart {args.plot}: {args.no_chart}", file=sys.stderr)
        return 1
    return 0
