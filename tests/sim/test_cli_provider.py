"""``plan --provider``: static, adaptive and feasible admission compared on the same traffic, as a
table, as JSON and as charts, and the new options' errors."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from boundedgate import Adaptive
from boundedgate._cli import main
from boundedgate._cli._compare import in_seconds
from boundedgate.sim import (
    Bursts,
    LogNormal,
    Poisson,
    Provider,
    Request,
    compare_admission,
    generate,
    read_script,
    steps,
)

TRAFFIC = [
    "plan",
    "--rate",
    "40",
    "--burst",
    "150",
    "--burst-at",
    "6s",
    "--duration",
    "16s",
    "--service",
    "lognormal:300ms,1.5s",
    "--budget",
    "2.5s",
    "--seed",
    "3",
]
COMPARE = [*TRAFFIC, "-c", "20", "-q", "30", "--provider", "20,5s:10,11s:20"]
#: The provider's default speeds, for requests with their sizes.
SPEEDS = {"overhead_seconds": 0.2, "prefill_tokens_per_second": 5000.0, "decode_tokens_per_second": 40.0}
CONTENDERS = [
    "semaphore",
    "semaphore+timeout",
    "gate Q=30",
    "best static",
    "adaptive Q=30",
    "feasible",
    "adaptive+feasible",
    "recommended",
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def library(**provider: object) -> list[list[object]]:
    """What compare_admission gives on the same traffic: a row per contender."""
    jobs = generate(
        [Poisson(rate=40), Bursts(150, start_ms=6000)],
        LogNormal(mean_ms=300, p99_ms=1500),
        budget_ms=2500,
        duration_ms=16_000,
        seed=3,
    )
    comparison = compare_admission(
        in_seconds(jobs),
        Provider(steps(20, (5.0, 10), (11.0, 20)), **provider),  # type: ignore[arg-type]
        max_running=20,
        max_waiting=30,
    )
    return [
        [c.name, r.on_time, r.late, r.cut, r.provider_refused, r.expired, r.wasted_seconds]
        for c in comparison.contenders
        for r in [c.result]
    ]


def rows(out: str) -> dict[str, list[str]]:
    """The comparison table's cells by contender: the lines between its rule and the blank line."""
    lines = out.splitlines()
    first = next(number for number, line in enumerate(lines) if line.startswith("---")) + 1
    found = {}
    for line in lines[first : lines.index("", first)]:
        name, *cells = re.split(r"\s{2,}", line.strip())
        found[name] = cells
    return found


def test_the_table_compares_every_contender_on_the_same_traffic(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *COMPARE)
    assert status == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("Workload: 800 requests in 16.0s (Poisson 40/s + bursts of 150 at 6.00s)")
    assert lines[1] == "Provider: K=20, 10 from 5.00s, 20 from 11.0s; beyond K it answers 529 after 50ms"
    assert lines[2].startswith("Gates: C=20 (the adaptive ones' start), Q=30; adaptive: floor 1, ceiling 256")
    assert lines[3] == "Best static in hindsight: C=14, Q=150, of 100 settings tried (C 8 to 30, Q 0 to none)"
    header = next(line for line in lines if line.startswith("contender"))
    assert header.split() == [
        "contender", "C", "Q", "on", "time", "ratio", "late", "cut", "529/429", "refused", "expired", "no",
        "in", "wasted",
    ]  # fmt: skip
    table = rows(out)
    assert list(table) == CONTENDERS
    for name, on_time, late, cut, provider_refused, expired, wasted in library():
        cells = table[name]  # type: ignore[index]
        shown_on_time, shown_late, shown_cut, refused_by_provider = cells[2], cells[4], cells[5], cells[6]
        shown_expired, shown_wasted = cells[8], cells[10]
        assert (int(shown_on_time), int(shown_late), int(shown_cut)) == (on_time, late, cut), name
        assert (int(refused_by_provider), int(shown_expired)) == (provider_refused, expired), name
        assert shown_wasted == f"{wasted:.0f}s", name
    assert table["semaphore+timeout"][4] == "0"  # a timeout around the call: never an answer late
    assert table["best static"][:2] == ["14", "150"]
    assert table["best static"][3] == "1.000"
    assert table["semaphore"][:2] == ["20", "none"]
    assert table["gate Q=30"][:2] == ["20", "30"]
    low, high = (int(c) for c in table["adaptive Q=30"][0].split("-"))  # the range C took
    assert low < 20 <= high
    assert table["semaphore"][-2] == "-"  # a semaphore never says no
    assert table["gate Q=30"][-2] == "0ms"  # the gate says it at once
    assert "529/429: the provider's refusals" in out


def test_json_gives_the_same_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, *COMPARE, "--json")
    assert status == 0
    data = json.loads(out)
    assert data["workload"].startswith("800 requests in 16.0s")
    assert data["provider"] == {
        "capacity": {"given": "20,5s:10,11s:20", "steps": [[0.0, 20.0], [5.0, 10.0], [11.0, 20.0]]},
        "overload": "refuse",
        "refuse_seconds": 0.05,
        "rpm": None,
        **SPEEDS,
    }
    assert data["adaptive"] == dataclasses.asdict(Adaptive())  # the documented defaults
    assert data["best_static"] == {"max_running": 14, "max_waiting": 150}
    assert len(data["tried"]) == 100
    shown = ("name", "on_time", "late", "cut", "provider_refused", "expired", "wasted_seconds")
    assert [[c[name] for name in shown] for c in data["contenders"]] == library()
    assert data["contenders"][3]["ratio"] == 1.0


def test_a_queueing_provider_with_a_quota_and_adaptive_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*COMPARE, "--overload", "queue", "--floor", "5", "--ceiling", "12", "--rpm", "1200"]
    _, out, _ = run(capsys, *argv, "--refuse-after", "200ms", "--json")
    data = json.loads(out)
    assert data["provider"] == {
        "capacity": {"given": "20,5s:10,11s:20", "steps": [[0.0, 20.0], [5.0, 10.0], [11.0, 20.0]]},
        "overload": "queue",
        "refuse_seconds": 0.2,
        "rpm": 1200,
        **SPEEDS,
    }
    assert [data["adaptive"]["floor"], data["adaptive"]["ceiling"]] == [5, 12]
    for row in data["contenders"]:
        if row["adaptive"]:
            assert row["limits"][0] == [0.0, 20]  # it starts at -c, then stays within the bounds
            assert all(5 <= c <= 12 for _, c in row["limits"][1:]), row["name"]
            assert len(row["limits"]) > 1
    assert sum(row["provider_refused"] for row in data["contenders"]) > 0  # 429s: the quota is 20/s
    _, out, _ = run(capsys, *argv)
    assert out.splitlines()[1] == (
        "Provider: K=20, 10 from 5.00s, 20 from 11.0s; beyond K it queues the request: its first token "
        "comes after the wait; beyond 1200 rpm, 429 with a reset after 50ms"
    )
    assert "adaptive: floor 5, ceiling 12 (the recommended gate's at most C), the other" in out


def test_a_drift_and_a_constant_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, *TRAFFIC, "-c", "10", "-q", "20", "--provider", "drift:10,30,10s")
    assert "Provider: K from 10 to 30 over 10.0s, then 30; beyond K" in out
    assert "Best static in hindsight: C=" in out
    _, out, _ = run(capsys, *TRAFFIC, "-c", "10", "-q", "20", "--provider", "25", "--json")
    data = json.loads(out)
    assert data["provider"]["capacity"] == {"given": "25", "steps": [[0.0, 25.0]]}
    assert sorted({c for c, _ in data["tried"]}) == [10, 12, 15, 18, 20, 22, 25, 28, 31, 38]


def test_a_script_replays_against_the_provider(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "traffic.csv"
    _, generated, _ = run(capsys, *COMPARE, "--json", "--save-script", str(saved))
    _, replayed, _ = run(
        capsys,
        "plan",
        "--script",
        str(saved),
        "-c",
        "20",
        "-q",
        "30",
        "--provider",
        "20,5s:10,11s:20",
        "--json",
    )
    assert json.loads(generated)["contenders"] == json.loads(replayed)["contenders"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--provider", "20,40:10"], "'20,40:10': give K (a number > 0), steps K,T:K,..."),
        (["--provider", "0"], "'0': give K (a number > 0)"),
        (["--provider", "drift:10,30"], "or a drift drift:START,END,OVER"),
        (["--provider", "20,9s:10,5s:20"], "the steps' times must increase"),
        (["--provider", "20", "--overload", "drop"], "argument --overload: invalid choice: 'drop'"),
        (["--overload", "queue"], "--overload needs --provider"),
        (["--floor", "2"], "--floor needs --provider"),
        (["--refuse-after", "1s"], "--refuse-after needs --provider"),
        (["--overhead", "100ms"], "--overhead needs --provider"),
        (["--prefill", "8000"], "--prefill needs --provider"),
        (["--decode", "60"], "--decode needs --provider"),
        (["--provider", "20", "--decode", "0"], "'0': give a number > 0"),
        (["--provider", "20", "--prompt-tokens", "1000"], "give --service or the sizes"),
        (["--provider", "20", "--floor", "0"], "--floor is a whole number >= 1"),
        (["--provider", "20", "--floor", "9", "--ceiling", "4"], "--floor 9 is above --ceiling 4"),
        (["--provider", "20", "--refuse-after", "0ms"], "a duration must be > 0"),
        (["--provider", "20", "--floor", "300"], "--floor/--ceiling: need floor <= ceiling, got 300 and 256"),
        (
            ["--provider", "20", "--rpm", "60,120"],
            "--provider: give one --rpm (the provider's quota, answered 429 beyond it)",
        ),
        (["--provider", "20", "--rpm", "60", "--rpm-burst", "5"], "--provider takes no --rpm-burst"),
        (["--provider", "20", "--tpm", "6000"], "--provider takes no --tpm"),
        (["--provider", "20", "--feasible"], "--provider takes no --feasible"),
        (["--provider", "20", "--by-deadline"], "--provider takes no --by-deadline"),
        (["--provider", "20", "--override", "a=1,1"], "--provider takes no --override"),
        (["--provider", "20", "--priority-mix", "1,1"], "--provider takes no --priority-mix"),
        (["--provider", "20", "--priorities", "2"], "--provider takes no --priorities"),
    ],
)
def test_option_errors_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*TRAFFIC, "-c", "20", "-q", "30", *extra])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["-c", "10,20", "-q", "30"], "--provider compares one gate's settings: give one -c"),
        (["-c", "none", "-q", "30"], "--provider compares one gate's settings: give one -c"),
        (["-c", "20", "-q", "0,30"], "--provider compares one gate's settings: give one -q"),
    ],
)
def test_the_gate_compared_is_one_setting(
    capsys: pytest.CaptureFixture[str], settings: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*TRAFFIC, *settings, "--provider", "20"])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_traffic_without_a_budget_has_no_goodput_to_compare(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in COMPARE if a not in ("--budget", "2.5s")]
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "--provider counts answers within their budget: give --budget" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_plot_draws_C_against_K_and_the_goodput(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    pytest.importorskip("matplotlib")  # the test extra installs it, so CI draws these
    chart = tmp_path / f"provider{suffix}"
    status, out, err = run(capsys, *COMPARE, "--plot", str(chart))
    assert status == 0
    assert f"chart: {chart}" in err
    assert "best static" in out
    data = chart.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG")
        return
    svg = data.decode()
    assert svg.lstrip().startswith("<?xml")
    assert "<svg" in svg
    for series in (
        "K(t)",
        "C of adaptive Q=30",
        "C of adaptive+feasible",
        "on time per second",
        "less the best static",
    ):
        assert series in svg, series
    for name in CONTENDERS:
        assert f"<!-- {name} -->" in svg, name
    assert "K=20, 10 from 5.00s, 20 from 11.0s; C=20, Q=30" in svg  # the title


def test_plot_without_matplotlib_prints_the_table_and_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    chart = tmp_path / "provider.svg"
    status, out, err = run(capsys, *COMPARE, "--plot", str(chart))
    assert status == 1
    assert "best static" in out
    assert err.endswith(
        f"boundedgate: no chart {chart}: plotting needs matplotlib: pip install 'boundedgate[plot]'\n"
    )
    assert not chart.exists()


ROOT = Path(__file__).resolve().parents[2]
SHOWN = re.findall(
    r"```\n\$ (boundedgate [^\n]*)\n(.*?)```", (ROOT / "docs" / "adaptive.md").read_text(), flags=re.DOTALL
)


def test_the_adaptive_page_shows_a_comparison_against_a_provider() -> None:
    assert [shlex.split(command)[1] for command, _ in SHOWN] == ["plan"]
    assert "--provider" in SHOWN[0][0]


@pytest.mark.parametrize(("command", "shown"), SHOWN, ids=["plan --provider"])
def test_the_adaptive_page_shows_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, shown: str
) -> None:
    monkeypatch.chdir(ROOT)
    status, out, _ = run(capsys, *shlex.split(command)[1:])
    assert status == 0
    assert out == shown


def test_a_script_with_priorities_is_refused_and_queue_budgets_are_noted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    classes = tmp_path / "classes.csv"
    classes.write_text("id,arrival_ms,service_ms,budget_ms,priority\na,0,100,500,0\nb,0,100,500,1\n")
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--script", str(classes), "-c", "2", "-q", "2", "--provider", "2"])
    assert caught.value.code == 2
    assert (
        "--provider plays gates of one class: the script's requests have priorities"
        in capsys.readouterr().err
    )
    waits = tmp_path / "waits.csv"
    waits.write_text("id,arrival_ms,service_ms,budget_ms,max_wait_ms\na,0,100,500,50\nb,0,100,500,\n")
    status, out, err = run(capsys, "plan", "--script", str(waits), "-c", "1", "-q", "2", "--provider", "2")
    assert status == 0
    assert "boundedgate: note: --provider ignores the script's max_wait_ms" in err
    assert rows(out)["gate Q=2"][2] == "2"  # both on time: b waited 100 ms of its 500


def test_no_requests_compare_as_nothing_answered(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("id,arrival_ms,service_ms,budget_ms\n")
    status, out, _ = run(capsys, "plan", "--script", str(empty), "-c", "1", "-q", "0", "--provider", "2")
    assert status == 0
    assert rows(out)["best static"][2:5] == ["0", "-", "0"]  # no ratio to nothing


KEYED = [*TRAFFIC, "--key-mix", "globex=1,acme=3", "-c", "10", "-q", "15", "--provider", "20,5s:10,11s:20"]


def test_a_key_mix_is_a_gate_per_key_sharing_the_provider(capsys: pytest.CaptureFixture[str]) -> None:
    argv = KEYED
    status, out, err = run(capsys, *argv)
    assert status == 0
    assert err == ""
    lines = out.splitlines()
    assert "; key mix globex=1,acme=3; seed 3" in lines[0]
    assert lines[2].startswith(
        "Gates: a gate per key (2: acme, globex), each C=10 (the adaptive ones' start), Q=15;"
    )
    assert lines[3].startswith("Best static in hindsight: C=")
    assert lines[3].endswith("for each gate (C 4 to 15, Q 0 to none)")
    totals = rows(out)
    by_key = rows(out[out.index("on time by key") :])
    assert list(by_key) == list(totals) == [name.replace("30", "15") for name in CONTENDERS]
    for name, (acme, globex) in by_key.items():
        assert int(acme) + int(globex) == int(totals[name][2]), name
        assert int(acme) > int(globex)  # three requests in four are acme's
    _, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    for contender in data["contenders"]:
        assert [key["name"] for key in contender["keys"]] == ["acme", "globex"]
        assert sum(key["on_time"] for key in contender["keys"]) == contender["on_time"]
        assert sum(key["requests"] for key in contender["keys"]) == 800
    adaptive = next(c for c in data["contenders"] if c["name"] == "adaptive Q=15")
    assert adaptive["limits"][0] == [0.0, 20]  # the provider sees both gates' C
    low, high = (int(c) for c in totals["adaptive Q=15"][0].split("-"))  # each gate's C, not the sum
    seen = [c for key in adaptive["keys"] for _, c in key["limits"]]
    assert (low, high) == (min(seen), max(seen))


def test_plot_with_several_gates_draws_their_C_summed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    chart = tmp_path / "keys.svg"
    assert main([*KEYED, "--plot", str(chart)]) == 0
    assert "C of adaptive Q=15, all gates" in chart.read_text()


@pytest.mark.parametrize(
    ("capacity", "note"),
    [
        ("20,5s:10,20m:20", "K changes at 20m, after the last arrival (at 16.0s)"),
        ("drift:20,10,1h", "K changes at 60m, after the last arrival (at 16.0s)"),
    ],
)
def test_a_change_of_K_after_the_traffic_is_noted(
    capsys: pytest.CaptureFixture[str], capacity: str, note: str
) -> None:
    status, _, err = run(capsys, *TRAFFIC, "-c", "20", "-q", "30", "--provider", capacity)
    assert status == 0
    assert err == f"boundedgate: note: --provider {capacity}: {note}\n"


SIZED = [
    "plan", "--rate", "3", "--burst", "40", "--burst-at", "20s", "--duration", "1m",
    "--prompt-tokens", "lognormal:1500,12000", "--output-tokens", "lognormal:250,1200", "--budget", "15s",
    "--seed", "2", "-c", "20", "-q", "20", "--provider", "20",
]  # fmt: skip


def test_sized_traffic_is_compared_at_the_providers_speeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "sized.csv"
    status, out, _ = run(capsys, *SIZED, "--save-script", str(script))
    assert status == 0
    lines = out.splitlines()
    assert (
        "prompts lognormal, mean 1500 tokens, p99 12000 tokens; outputs lognormal, mean 250 tokens"
        in lines[0]
    )
    assert lines[1] == (
        "Provider: K=20; beyond K it answers 529 after 50ms; first token after 200ms + prompt / 5000 "
        "tokens/s, then output / 40 tokens/s"
    )
    jobs = read_script(script)
    traffic = in_seconds(jobs)
    assert all(isinstance(request, Request) for request in traffic)
    slower = Provider(20, overhead_seconds=0.5, prefill_tokens_per_second=2000, decode_tokens_per_second=20)
    _, out, _ = run(capsys, *SIZED, "--overhead", "500ms", "--prefill", "2000", "--decode", "20", "--json")
    data = json.loads(out)
    assert data["provider"]["overhead_seconds"] == 0.5
    assert data["provider"]["prefill_tokens_per_second"] == 2000
    assert data["provider"]["decode_tokens_per_second"] == 20
    expected = compare_admission(traffic, slower, max_running=20, max_waiting=20)
    assert [c["on_time"] for c in data["contenders"]] == [c.result.on_time for c in expected.contenders]
    assert [c["cut"] for c in data["contenders"]] == [c.result.cut for c in expected.contenders]
    # The same script replayed: the sizes, not its service_ms, decide the provider's time.
    _, replayed, _ = run(
        capsys, "plan", "--script", str(script), "-c", "20", "-q", "20", "--provider", "20",
        "--overhead", "500ms", "--prefill", "2000", "--decode", "20", "--json",
    )  # fmt: skip
    assert json.loads(replayed)["contenders"] == data["contenders"]


def test_a_saved_sized_script_is_timed_at_the_providers_speeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "fast.csv"
    status, _, _ = run(capsys, *SIZED, "--prefill", "50000", "--decode", "400", "--save-script", str(script))
    assert status == 0
    fast = Provider(20, prefill_tokens_per_second=50_000, decode_tokens_per_second=400)
    for job in read_script(script):
        assert job.prompt_tokens is not None
        assert job.output_tokens is not None
        assert job.service_ms == max(
            1, round(1000 * fast.service_seconds(job.prompt_tokens, job.output_tokens))
        )
