"""``plan --provider``: the plan's traffic against a provider, every way of admitting compared on it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from collections.abc import Iterable, Sequence

from .._core import Adaptive
from ..sim import Comparison, Job, Provider, Request, compare_admission
from ..sim._plot import plot_comparison
from ..sim._text import comparison_table, human_ms, key_name, keys_comparison_table
from . import _units
from ._progress import ProgressBar

__all__ = ("add_options", "check_options", "compare", "in_seconds", "provider_of")

#: The options that shape the provider or the adaptive contenders: each needs --provider.
_PROVIDER_ONLY = ("overload", "refuse_after", "floor", "ceiling", "overhead", "prefill", "decode")
#: Options of a plan that the comparison has no use for: refused with --provider, not ignored.
_NOT_WITH_PROVIDER = (
    "tpm",
    "rpm_burst",
    "feasible",
    "by_deadline",
    "override",
    "priorities",
    "priority_mix",
    "cost",
    "actual_cost",
)

#: The keys the "Gates" line names; and the most keys the table of answers on time by key has.
SHOWN_KEYS = 5
TABLED_KEYS = 8

FOOTNOTE = textwrap.fill(
    "(on time: answered within the budget, the goodput; ratio: on time / the best static gate's; "
    "C of an adaptive gate: the range it took; cut: cut off at the deadline by a timeout around the call, "
    "no answer; 529/429: the provider's refusals, passed on to callers as "
    "errors; refused: by the gate at arrival, its queue full or the deadline out of reach; expired: left "
    "the queue at the deadline; no in: mean time from arrival to the gate's refusal; wasted: the "
    "provider's time spent on answers nobody waited for, late or cut off)",
    width=100,
)


def in_seconds(jobs: Iterable[Job]) -> list[tuple[float, float, float | None] | Request]:
    """A script's jobs as a simulated client's traffic, in seconds.

    ``(arrival, service, budget)`` per job, or a :class:`Request` with its sizes for a job that has
    both ``prompt_tokens`` and ``output_tokens`` (the provider then derives its time from them).
    """
    return [_in_seconds(job) for job in jobs]


def _in_seconds(job: Job) -> tuple[float, float, float | None] | Request:
    arrival, service = job.arrival_ms / 1000, job.service_ms / 1000
    budget = None if job.budget_ms is None else job.budget_ms / 1000
    if job.prompt_tokens is None or job.output_tokens is None:
        return arrival, service, budget
    return Request(arrival, service, budget, job.prompt_tokens, job.output_tokens)


def add_options(plan: argparse.ArgumentParser) -> None:
    """The ``provider`` group of ``plan``'s options."""
    group = plan.add_argument_group(
        "provider",
        "with --provider, compare on the same traffic a plain semaphore, a semaphore inside a timeout, the "
        "gate (one -c and one -q), the best static C and Q in hindsight, the adaptive gate (starting at -c, "
        "Adaptive() defaults but --floor and --ceiling), feasible admission and both, and the recommended "
        "configuration (both, C never above -c, each call cut off at its deadline), against a provider "
        "with that capacity; --rpm is then the provider's quota",
    )
    group.add_argument(
        "--provider",
        metavar="K",
        type=_units.capacity,
        help="the provider's capacity: 20, steps 20,40s:10,80s:20 (10 from 40s, 20 again from 80s), "
        "or a drift drift:10,30,2m (from 10 to 30 over 2m)",
    )
    group.add_argument(
        "--overload",
        choices=("refuse", "queue"),
        help="beyond K the provider answers 529 (refuse, the default) or queues the request (queue)",
    )
    group.add_argument(
        "--refuse-after",
        metavar="T",
        type=_units.duration_ms,
        help="how long the provider's 529 or 429 takes (default 50ms)",
    )
    group.add_argument(
        "--overhead",
        metavar="T",
        type=_units.duration_ms,
        help="for requests with their sizes: the provider's fixed time before any token (default 200ms)",
    )
    group.add_argument(
        "--prefill",
        metavar="N",
        type=_units.amount,
        help="for requests with their sizes: prompt tokens the provider reads a second (default 5000)",
    )
    group.add_argument(
        "--decode",
        metavar="N",
        type=_units.amount,
        help="for requests with their sizes: output tokens it streams a second, per request (default 40)",
    )
    group.add_argument(
        "--floor", metavar="N", type=_units.whole_number("--floor"), help="the adaptive gates' lowest C"
    )
    group.add_argument(
        "--ceiling",
        metavar="N",
        type=_units.whole_number("--ceiling"),
        help="the adaptive gates' highest C (default 256)",
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, before any traffic is made, the options that do not go together with ``--provider``."""
    if args.provider is None:
        for name in _PROVIDER_ONLY:
            if getattr(args, name) is not None:
                parser.error(f"{_flag(name)} needs --provider")
        return
    for name in _NOT_WITH_PROVIDER:
        if getattr(args, name) not in (None, False, []):
            parser.error(f"--provider takes no {_flag(name)}: it compares gates of one class, all alike")
    if len(args.max_running) != 1 or args.max_running[0] is None:
        parser.error(
            "--provider compares one gate's settings: give one -c, a whole number (the best is swept for)"
        )
    if len(args.max_waiting) != 1:
        parser.error("--provider compares one gate's settings: give one -q (the best is swept for)")
    if args.rpm is not None and (len(args.rpm) != 1 or args.rpm[0] is None):
        parser.error("--provider: give one --rpm (the provider's quota, answered 429 beyond it)")
    if args.floor is not None and args.ceiling is not None and args.floor > args.ceiling:
        parser.error(f"--floor {args.floor} is above --ceiling {args.ceiling}")


def _check_traffic(jobs: Sequence[Job], parser: argparse.ArgumentParser) -> None:
    if jobs and all(job.budget_ms is None for job in jobs):
        parser.error(
            "--provider counts answers within their budget: give --budget (or a script with budget_ms)"
        )
    if any(job.priority for job in jobs):
        parser.error("--provider plays gates of one class: the script's requests have priorities")
    if any(job.max_wait_ms is not None for job in jobs):
        print(
            "boundedgate: note: --provider ignores the script's max_wait_ms: a request waits in the queue "
            "until its budget is spent",
            file=sys.stderr,
        )


def _note_late_changes(capacity: _units.Capacity, jobs: Sequence[Job]) -> None:
    # A K that changes after the last arrival is most likely a unit mistyped: 80m for 80s.
    last = max((job.arrival_ms for job in jobs), default=0) / 1000
    changes = [at for at, _ in capacity.changes] + ([capacity.drift[1]] if capacity.drift else [])
    late = [at for at in changes if at > last]
    if late:
        print(
            f"boundedgate: note: --provider {capacity.text}: K changes at {human_ms(late[0] * 1000)}, "
            f"after the last arrival (at {human_ms(last * 1000)})",
            file=sys.stderr,
        )


def provider_of(args: argparse.Namespace) -> Provider:
    """The provider ``--provider`` and its options describe (its speeds also time a sized workload)."""
    refuse = 0.05 if args.refuse_after is None else args.refuse_after / 1000
    rpm = None if args.rpm is None else args.rpm[0]
    speeds = {
        "overhead_seconds": None if args.overhead is None else args.overhead / 1000,
        "prefill_tokens_per_second": args.prefill,
        "decode_tokens_per_second": args.decode,
    }
    given = {name: value for name, value in speeds.items() if value is not None}
    return Provider(args.provider.function(), args.overload or "refuse", refuse, rpm=rpm, **given)


def _adaptive(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Adaptive:
    bounds = {name: getattr(args, name) for name in ("floor", "ceiling") if getattr(args, name) is not None}
    try:
        return Adaptive(**bounds)
    except ValueError as error:  # a floor above the default ceiling
        parser.error(f"--floor/--ceiling: {error}")


def _describe_provider(args: argparse.Namespace, provider: Provider, sized: bool) -> str:
    text = f"Provider: {args.provider.describe()}; beyond K it "
    if provider.overload == "queue":
        text += "queues the request: its first token comes after the wait"
    else:
        text += f"answers 529 after {human_ms(provider.refuse_seconds * 1000)}"
    if provider.rpm is not None:
        rpm = f"{provider.rpm:g}"
        text += f"; beyond {rpm} rpm, 429 with a reset after {human_ms(provider.refuse_seconds * 1000)}"
    if sized:
        text += (
            f"; first token after {human_ms(provider.overhead_seconds * 1000)} + prompt / "
            f"{provider.prefill_tokens_per_second:g} tokens/s, then output / "
            f"{provider.decode_tokens_per_second:g} tokens/s"
        )
    return text


def _describe_gates(
    args: argparse.Namespace, comparison: Comparison, adaptive: Adaptive, keys: Sequence[str]
) -> list[str]:
    c, q = args.max_running[0], args.max_waiting[0]
    best = comparison.best
    cs = sorted({c for c, _ in comparison.tried})
    qs = list(dict.fromkeys(q for _, q in comparison.tried))
    gates, each, per = "Gates: ", "", ""
    if len(keys) > 1:
        names = ", ".join(key_name(key) for key in keys[:SHOWN_KEYS])
        gates = f"Gates: a gate per key ({len(keys)}: {names}{', ...' if len(keys) > SHOWN_KEYS else ''}), "
        each, per = "each ", " for each gate"
    return [
        f"{gates}{each}C={c} (the adaptive ones' start), Q={_q(q)}; adaptive: floor {adaptive.floor}, "
        f"ceiling {adaptive.ceiling} (the recommended gate's at most C), the other Adaptive() defaults",
        f"Best static in hindsight: C={best.max_running}, Q={_q(best.max_waiting)}, "
        f"of {len(comparison.tried)} settings tried{per} "
        f"(C {cs[0]} to {cs[-1]}, Q {_q(qs[0])} to {_q(qs[-1])})",
    ]


def _q(q: int | None) -> str:
    return "none" if q is None else str(q)


def compare(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    jobs: Sequence[Job],
    description: str,
    plotting: bool,
) -> None:
    """Run the comparison ``plan --provider`` asks for and print it (and draw it)."""
    _check_traffic(jobs, parser)
    _note_late_changes(args.provider, jobs)
    provider = provider_of(args)
    adaptive = _adaptive(args, parser)
    by_key: dict[str, list[Job]] = {}
    for job in jobs:
        by_key.setdefault(job.key, []).append(job)
    keys = sorted(by_key)
    traffics = {key: in_seconds(by_key[key]) for key in keys}
    comparison = compare_admission(
        traffics if len(keys) > 1 else in_seconds(jobs),
        provider,
        max_running=args.max_running[0],
        max_waiting=args.max_waiting[0],
        adaptive=adaptive,
        progress=ProgressBar("simulating", sys.stderr),
    )
    if args.json:
        out = {
            "workload": description,
            "provider": {
                "capacity": args.provider.to_dict(),
                "overload": provider.overload,
                "refuse_seconds": provider.refuse_seconds,
                "rpm": provider.rpm,
                "overhead_seconds": provider.overhead_seconds,
                "prefill_tokens_per_second": provider.prefill_tokens_per_second,
                "decode_tokens_per_second": provider.decode_tokens_per_second,
            },
            "adaptive": dataclasses.asdict(adaptive),
            **comparison.to_dict(),
        }
        print(json.dumps(out, indent=1))
    else:
        print(f"Workload: {description}")
        sized = any(isinstance(request, Request) for jobs in traffics.values() for request in jobs)
        print(_describe_provider(args, provider, sized))
        print("\n".join(_describe_gates(args, comparison, adaptive, keys)))
        print()
        print(comparison_table(comparison))
        if 1 < len(keys) <= TABLED_KEYS:
            print()
            print(keys_comparison_table(comparison, keys))
        print()
        print(FOOTNOTE)
        if len(keys) > TABLED_KEYS:
            print(f"(--json gives each of the {len(keys)} gates' counts)")
    if plotting:
        title = f"{args.provider.describe()}; C={args.max_running[0]}, Q={_q(args.max_waiting[0])}"
        plot_comparison(comparison, provider, args.plot, title=title)
        print(f"\nchart: {args.plot}", file=sys.stderr)
