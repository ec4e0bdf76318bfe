"""The command line: tables, JSON, errors and exit statuses, charts with and without matplotlib."""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from boundedgate._cli import main
from boundedgate._cli._progress import ProgressBar
from boundedgate.sim import Job, ScriptError, read_script, write_script

SEED_CSV = "id,arrival_ms,service_ms,budget_ms\nA,0,100,300\nB,0,100,300\nC,0,50,200\nD,0,50,90\nE,0,20,200\n"
PLAN = [
    "plan",
    "--rate",
    "20",
    "--service",
    "lognormal:200ms,2s",
    "--budget",
    "1s",
    "--duration",
    "1m",
    "-c",
    "4",
]


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    path = tmp_path / "seed.csv"
    path.write_text(SEED_CSV)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_simulate_prints_the_seeds_table(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    status, out, err = run(capsys, "simulate", str(seed), "--max-running", "2", "--max-waiting", "2")
    assert status == 0
    assert err == ""
    lines = out.splitlines()
    assert "C   completed        0    100  150    100         150" in lines
    assert "D   expired          0      -   90     90          90" in lines
    assert "E   rejected         0      -    0      -           0" in lines
    assert "peaks: 2 running, 2 waiting" in lines
    assert "expired in the queue         1  20.0%" in lines
    assert "end-to-end time  100  150  150  150  3 requests that ran" in lines
    assert "event" not in out  # no trace unless asked


def test_simulate_trace_and_summary_only(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    _, out, _ = run(capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--trace")
    assert "  90  expired    D         2        1" in out.splitlines()
    _, out, _ = run(capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--summary-only")
    assert "completed        0" not in out
    assert "peaks: 2 running, 2 waiting" in out


def test_simulate_json_parses(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    status, out, _ = run(capsys, "simulate", str(seed), "-c", "2", "-q", "none", "--json")
    assert status == 0
    data = json.loads(out)
    assert data["max_waiting"] is None
    assert data["summary"]["rejected"] == 0
    assert [r["outcome"] for r in data["requests"]] == [
        "completed",
        "completed",
        "completed",
        "expired",
        "completed",
    ]
    assert data["trace"][0] == {"time_ms": 0, "event": "started", "id": "A", "running": 1, "waiting": 0}


def test_simulate_reports_an_invalid_script_by_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("id,arrival_ms,service_ms\nA,0,5\nB,0,0\n")
    status, out, err = run(capsys, "simulate", str(path), "-c", "1", "-q", "0")
    assert status == 1
    assert out == ""
    assert err == f"boundedgate: error: {path}, line 3 (id 'B'): service_ms must be >= 1, got 0\n"


def test_simulate_reports_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "simulate", str(tmp_path / "nope.csv"), "-c", "1", "-q", "0")
    assert status == 1
    assert "cannot read" in err
    assert "No such file" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "x.csv", "-q", "1"], "the following arguments are required: --max-running"),
        (["simulate", "x.csv", "-c", "0", "-q", "1"], "max_running values are whole numbers >= 1, or none"),
        (["simulate", "x.csv", "-c", "1.5", "-q", "1"], "max_running values are whole numbers >= 1, or none"),
        (["simulate", "x.csv", "-c", "1,2", "-q", "1"], "give one number"),
        (["simulate", "x.csv", "-c", "1", "-q", "-1"], "whole numbers >= 0"),
        (["simulate", "x.csv", "-c", "1", "-q", "1,2"], "give one number"),
        (
            ["simulate", "x.csv", "-c", "1", "-q", "1", "--plot", "x.jpg"],
            "a chart is saved as .svg, .png, .pdf",
        ),
        (["plan", "-c", "1", "-q", "1", "--service", "2s"], "give --rate and/or --burst"),
        (["plan", "-c", "1", "-q", "1", "--rate", "5"], "give --service"),
        (["plan", "-c", "1", "-q", "1", "--rate", "5/d", "--service", "2s"], "is not a rate"),
        (["plan", "-c", "1", "-q", "1", "--rate", "5", "--service", "2"], "give a number and a unit"),
        (["plan", "-c", "1", "-q", "1", "--rate", "5", "--service", "gamma:2s"], "give 2s, fixed:2s"),
        (
            ["plan", "-c", "1", "-q", "1", "--rate", "5", "--service", "lognormal:2s,1s"],
            "p99 must be above its mean",
        ),
        (
            ["plan", "-c", "1", "-q", "1", "--rate", "5", "--service", "2s", "--budget", "30"],
            "give a number and a unit",
        ),
        (
            ["plan", "-c", "1", "-q", "1", "--rate", "5", "--service", "2s", "--burst-at", "1s"],
            "need --burst",
        ),
        (["plan", "-c", "1", "-q", "1", "--script", "x.csv", "--rate", "5"], "takes no --rate"),
        (["plan", "-c", "0,none", "-q", "1", "--rate", "5", "--service", "2s"], "max_running values"),
        (
            ["plan", "-c", "1", "-q", "1", "--burst", "1", "--service", "2s", "--duration", "1e300h"],
            "'1e300h': a duration is at most 1e+15ms (about 31,700 years)",
        ),
        (
            [
                "plan",
                "-c",
                "1",
                "-q",
                "1",
                "--burst",
                "1",
                "--burst-every",
                "1ms",
                "--service",
                "2s",
                "--duration",
                "1e13ms",
            ],
            "would make 10,000,000,000,000 requests; plan generates at most 1,000,000",
        ),
        ([], "required: COMMAND"),
    ],
)
def test_argument_errors_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_prints_a_line_per_setting(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *PLAN, "--max-waiting", "0,5,none")
    assert status == 0
    assert err == ""  # stderr is not a terminal: no progress bar
    assert out.startswith("Workload: ")
    assert "(Poisson 20/s); service lognormal, mean 200ms, p99 2.00s; budget 1.00s; seed 0" in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("max_running"))
    assert header.split() == [
        "max_running",
        "max_waiting",
        "rejected",
        "expired",
        "late",
        "on",
        "time",
        "p99",
        "wait",
        "p99",
        "end-to-end",
        "peak",
        "waiting",
    ]
    rows = [line.split() for line in out.splitlines() if line.lstrip().startswith("4 ")]
    assert [row[1] for row in rows] == ["0", "5", "none"]
    assert rows[-1][2] == "0%"  # an unbounded queue rejects nobody


def test_plan_json_parses_and_matches_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, *PLAN, "--max-waiting", "0,5", "--json")
    data = json.loads(out)
    assert [(r["max_running"], r["max_waiting"]) for r in data["rows"]] == [(4, 0), (4, 5)]
    assert data["rows"][0]["summary"]["requests"] > 1000
    assert data["rows"][0]["summary"]["rejected"] >= data["rows"][1]["summary"]["rejected"]


def test_plan_bursts_and_saved_script_replays_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "traffic.csv"
    argv = [
        "plan",
        "--burst",
        "30",
        "--burst-every",
        "1s",
        "--service",
        "exp:150ms",
        "--duration",
        "5s",
        "-c",
        "3",
        "-q",
        "0,10",
    ]
    _, generated, _ = run(capsys, *argv, "--json", "--save-script", str(saved))
    assert len(read_script(saved)) == 150
    _, replayed, _ = run(capsys, "plan", "--script", str(saved), "-c", "3", "-q", "0,10", "--json")
    assert json.loads(generated)["rows"] == json.loads(replayed)["rows"]
    assert json.loads(replayed)["workload"] == f"150 requests from {saved}"


def test_plan_is_reproducible_and_seeded(capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = run(capsys, *PLAN, "-q", "3", "--json")
    _, again, _ = run(capsys, *PLAN, "-q", "3", "--json")
    _, other, _ = run(capsys, *PLAN, "-q", "3", "--json", "--seed", "9")
    assert first == again != other


def test_progress_bar_draws_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    bar = ProgressBar("simulating", terminal)
    bar(0, 4)
    bar(2, 4)
    assert terminal.getvalue().endswith("\rsimulating [###############...............] 2/4")
    bar(4, 4)
    assert terminal.getvalue().endswith(
        "\r" + " " * len("simulating [##############################] 4/4") + "\r"
    )
    plain = io.StringIO()
    ProgressBar("simulating", plain)(1, 2)
    assert plain.getvalue() == ""


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_plot_draws_a_chart(
    capsys: pytest.CaptureFixture[str], seed: Path, tmp_path: Path, suffix: str
) -> None:
    pytest.importorskip("matplotlib")  # the test extra installs it, so CI draws these
    chart = tmp_path / f"trace{suffix}"
    status, _, err = run(capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--plot", str(chart))
    assert status == 0
    assert f"chart: {chart}" in err
    data = chart.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data
    sweep_chart = tmp_path / f"sweep{suffix}"
    status, _, _ = run(capsys, *PLAN, "-q", "0,5,none", "--plot", str(sweep_chart))
    assert status == 0
    assert sweep_chart.stat().st_size > 1000


def test_plot_without_matplotlib_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], seed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    chart = tmp_path / "trace.svg"
    status, out, err = run(capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--plot", str(chart))
    assert status == 1  # the chart asked for is not there
    assert out == run(capsys, "simulate", str(seed), "-c", "2", "-q", "2")[1]  # the tables all are
    assert (
        err == f"boundedgate: no chart {chart}: plotting needs matplotlib: pip install 'boundedgate[plot]'\n"
    )
    assert not chart.exists()
    sweep_chart = tmp_path / "sweep.svg"
    status, out, err = run(capsys, *PLAN, "-q", "0,5", "--plot", str(sweep_chart))
    assert status == 1
    assert "max_running  max_waiting" in out
    assert err.endswith(
        f"boundedgate: no chart {sweep_chart}: plotting needs matplotlib: pip install 'boundedgate[plot]'\n"
    )
    assert not sweep_chart.exists()


def test_a_long_script_prints_its_summary_unless_asked_for_every_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    long = tmp_path / "long.csv"
    write_script([Job(f"r{i}", i, 5) for i in range(51)], long)
    status, out, _ = run(capsys, "simulate", str(long), "-c", "1", "-q", "1")
    assert status == 0
    assert "r50" not in out  # no line per request
    assert "completed on time" in out
    assert out.rstrip().endswith(
        "(the summary alone, for 51 requests: --requests prints each one, --trace every event)"
    )
    status, out, _ = run(capsys, "simulate", str(long), "-c", "1", "-q", "1", "--requests")
    assert status == 0
    assert "r50" in out
    assert "the summary alone" not in out
    short = tmp_path / "short.csv"
    write_script([Job(f"r{i}", i, 5) for i in range(50)], short)
    _, out, _ = run(capsys, "simulate", str(short), "-c", "1", "-q", "1")
    assert "r49" in out
    assert "the summary alone" not in out


def test_unknown_columns_are_refused_unless_ignored_on_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    export = tmp_path / "export.csv"
    export.write_text(
        "id,arrival_ms,service_ms,budget_ms,user_agent,status\nA,0,100,300,curl,200\nB,0,50,,httpx,200\n"
    )
    status, _, err = run(capsys, "simulate", str(export), "-c", "1", "-q", "1")
    assert status == 1
    assert "unknown column 'user_agent'" in err
    status, out, _ = run(capsys, "simulate", str(export), "-c", "1", "-q", "1", "--ignore-unknown-columns")
    assert status == 0
    assert out.startswith(f"2 requests from {export}")
    status, out, _ = run(
        capsys, "plan", "--script", str(export), "--ignore-unknown-columns", "-c", "1", "-q", "0,1"
    )
    assert status == 0
    assert out.startswith(f"Workload: 2 requests from {export}")
    data = tmp_path / "export.json"
    data.write_text('[{"id": "A", "arrival_ms": 0, "service_ms": 100, "trace_id": "abc"}]')
    assert [job.id for job in read_script(data, ignore_unknown=True)] == ["A"]
    with pytest.raises(ScriptError, match="unknown column 'trace_id'"):
        read_script(data)


def test_python_dash_m_and_the_console_script(seed: Path) -> None:
    for command in (
        [sys.executable, "-m", "boundedgate"],
        [str(Path(sys.executable).with_name("boundedgate"))],
    ):
        done = subprocess.run(
            [*command, "simulate", str(seed), "-c", "2", "-q", "2", "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["summary"]["completed"] == 3


README = Path(__file__).resolve().parents[2] / "README.md"
SIMULATOR_PAGE = README.parent / "docs" / "simulator.md"
COMMANDS = re.findall(r"```\n\$ (boundedgate [^\n]*)\n(.*?)```", SIMULATOR_PAGE.read_text(), flags=re.DOTALL)


def test_the_simulator_page_shows_commands() -> None:
    assert [command.split()[1] for command, _ in COMMANDS] == [
        "simulate",
        "plan",
        "simulate",
        "plan",
        "simulate",
    ]


@pytest.mark.parametrize(("command", "shown"), COMMANDS, ids=[c.split()[1] for c, _ in COMMANDS])
def test_the_simulator_page_shows_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, shown: str
) -> None:
    monkeypatch.chdir(README.parent)
    status, out, _ = run(capsys, *shlex.split(command)[1:])
    assert status == 0
    assert out == shown


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    # `boundedgate simulate big.csv | head`: the pipe closes long before the table is written.
    script = tmp_path / "big.csv"
    write_script([Job(f"r{i}", i, 5) for i in range(20_000)], script)
    command = [
        sys.executable,
        "-m",
        "boundedgate",
        "simulate",
        str(script),
        "-c",
        "1",
        "-q",
        "1",
        "--requests",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline().startswith(b"20000 requests")
        process.stdout.close()
        errors = process.stderr.read()
    assert process.returncode == 1
    assert errors == b""


def test_priorities_from_the_script_or_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "classes.csv"
    path.write_text("id,arrival_ms,service_ms,priority\nrun,0,10,0\nlow1,0,5,1\nlow2,1,5,1\nurgent,2,5,0\n")
    status, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "2")
    assert status == 0
    assert "through max_running=1, max_waiting=2, priorities=2, jump_share=0.2" in out
    assert "low2    evicted          1      -    2      1           1" in out.splitlines()
    assert ["evicted", "from", "the", "queue", "1", "25.0%"] in [line.split() for line in out.splitlines()]
    status, _, err = run(capsys, "simulate", str(path), "-c", "1", "-q", "2", "--priorities", "1")
    assert status == 1
    assert "(id 'low1'): priority 1 is not one of the gate's 1 classes" in err
    _, out, _ = run(
        capsys,
        "simulate",
        str(path),
        "-c",
        "1",
        "-q",
        "2",
        "--priorities",
        "3",
        "--jump-share",
        "0",
        "--json",
    )
    data = json.loads(out)
    assert (data["priorities"], data["jump_share"]) == (3, 0)


def test_plan_with_a_priority_mix_shows_evictions(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, *PLAN, "-q", "0,3", "--priority-mix", "1,4")
    assert status == 0
    assert "priority mix 1,4" in out
    assert "Gate: priorities=2, jump_share=0.2" in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("max_running"))
    assert "evicted" in header.split()
    _, out, _ = run(capsys, *PLAN, "-q", "0,3", "--priority-mix", "1,4", "--json")
    data = json.loads(out)
    assert data["priorities"] == 2
    assert data["rows"][1]["summary"]["evicted"] > 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--jump-share", "1"], "jump_share is a number >= 0 and < 1"),
        (["--priority-mix", "1,-1"], "give a weight >= 0 per priority class"),
        (["--priority-mix", "0,0"], "give a weight >= 0 per priority class"),
        (["--priorities", "0"], "'0': --priorities is a whole number >= 1"),
        (["--priorities", "1e8"], "'1e8': --priorities is a whole number >= 1"),
    ],
)
def test_priority_argument_errors(capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    with pytest.raises(SystemExit):
        main([*PLAN, "-q", "1", *extra])
    assert message in capsys.readouterr().err


RATED = [
    "simulate",
    "examples/rate_limited.csv",
    "-c",
    "2",
    "-q",
    "3",
    "--rpm",
    "60",
    "--rpm-burst",
    "2",
    "--tpm",
    "6000",
]


@pytest.fixture
def repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(README.parent)


@pytest.mark.usefixtures("repository")
def test_simulate_with_rate_limits_shows_outcomes_balances_and_settles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, *RATED, "--trace")
    assert status == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0].endswith("through max_running=2, max_waiting=3, 60 rpm (burst 2), 6000 tpm (burst 6000)")
    assert "e   rate_limited        0      -     0      -           0" in lines
    assert "f   rate_limited     1200      -  1200      -           0" in lines
    assert "d   completed           0   2000  3500   2000        3500" in lines  # refunds let it in
    assert "time  event         id  running  waiting  60 rpm  6000 tpm" in lines
    assert "1500  settled       a         2        2     1.5      3350" in lines
    assert "rate limited at once         2  33.3%" in lines


@pytest.mark.usefixtures("repository")
def test_simulate_json_with_rate_limits(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, *RATED, "--json")
    data = json.loads(out)
    assert data["rate_limits"] == [
        {"name": "60 rpm", "unit": "requests", "per_second": 1.0, "burst": 2.0, "floor": -2.0},
        {"name": "6000 tpm", "unit": "tokens", "per_second": 100.0, "burst": 6000.0, "floor": -6000.0},
    ]
    assert data["summary"]["rate_limited"] == 2
    assert data["trace"][0] == {
        "time_ms": 0,
        "event": "started",
        "id": "a",
        "running": 1,
        "waiting": 0,
        "tokens": [1, 4000],
    }


def test_simulate_a_pure_rate_limiter(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    status, out, _ = run(
        capsys, "simulate", str(seed), "-c", "none", "-q", "2", "--rpm", "600", "--rpm-burst", "2"
    )
    assert status == 0
    assert "through max_running=none, max_waiting=2, 600 rpm (burst 2)" in out
    # Ten a second, two at once: C's token comes at 100; behind it, D's would come after its
    # deadline and E's at its deadline, 200: both are refused at once, rather than queued to expire.
    assert [line.split()[:4] for line in out.splitlines()[6:9]] == [
        ["C", "completed", "0", "100"],
        ["D", "rate_limited", "0", "-"],
        ["E", "rate_limited", "0", "-"],
    ]


def test_tpm_without_costs_says_so(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    status, _, err = run(
        capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--tpm", "1000", "--summary-only"
    )
    assert status == 0
    assert "--tpm is set, but no request has a cost or an actual_cost: each pays 0 tokens" in err


@pytest.mark.usefixtures("repository")
def test_a_cost_above_the_tpm_burst_fails_naming_the_row(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *RATED[:-1], "3000")
    assert status == 1
    assert out == ""
    assert err == (
        "boundedgate: error: examples/rate_limited.csv: job 5 (id 'f'): cost 6000 exceeds the burst of "
        "rate limit '3000 tpm' (3000): it could never be served\n"
    )
    status, _, err = run(capsys, *RATED, "--rpm-burst", "0.5")
    assert status == 1
    assert "--rpm/--tpm: burst must be >= 1 for a limit counted in requests, got 0.5" in err


def test_plan_sweeps_quotas_and_settles_costs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        *PLAN,
        "-q",
        "5",
        "--cost",
        "2000",
        "--actual-cost",
        "exp:800",
        "--rpm",
        "60,none",
        "--tpm",
        "60000,120000",
    ]
    status, out, err = run(capsys, *argv, "--rpm-burst", "10")
    assert status == 0
    assert err == ""
    assert "; cost 2000 tokens; settles exponential, mean 800 tokens; seed 0" in out
    assert "Gate: rpm burst 10; tpm burst of a minute's quota" in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("max_running"))
    assert "rate limits" in header
    assert "rate limited" in header
    rows = [line for line in out.splitlines() if line.lstrip().startswith("4 ")]
    expected = ["60 rpm + 60000 tpm", "60 rpm + 120000 tpm", "60000 tpm", "120000 tpm"]
    assert len(rows) == len(expected)
    for row, name in zip(rows, expected, strict=True):
        assert [cell.strip() for cell in row.split("  ") if cell][:3] == ["4", "5", name], row
    _, out, _ = run(capsys, *argv, "--json")
    rows = json.loads(out)["rows"]
    assert [[limit["name"] for limit in row["rate_limits"]] for row in rows] == [
        ["60 rpm", "60000 tpm"],
        ["60 rpm", "120000 tpm"],
        ["60000 tpm"],
        ["120000 tpm"],
    ]
    assert rows[0]["summary"]["completed"] < rows[3]["summary"]["completed"]


def test_plan_saves_costs_in_the_script(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "costed.csv"
    status, _, _ = run(capsys, *PLAN, "-q", "5", "--cost", "lognormal:1000,4000", "--save-script", str(saved))
    assert status == 0
    jobs = read_script(saved)
    assert all(type(job.cost) is int and job.cost > 0 for job in jobs)
    assert saved.read_text().splitlines()[0] == "id,arrival_ms,service_ms,budget_ms,cost"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rpm", "0"], "give quotas per minute > 0 separated by commas, or none"),
        (["--rpm", "60,x"], "give quotas per minute > 0"),
        (["--tpm-burst", "-1"], "give a number > 0"),
        (["--cost", "lognormal:1000,500"], "p99 must be above its mean"),
        (["--cost", "2s"], "'2s': give a number > 0"),
        (["--actual-cost", "gamma:3"], "give 2000, fixed:2000"),
        (["--tpm-burst", "100"], "--tpm-burst needs --tpm"),
    ],
)
def test_rate_limit_argument_errors(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*PLAN, "-q", "1", *extra])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_replaying_a_script_takes_no_costs(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--script", str(seed), "-c", "1", "-q", "1", "--cost", "100"])
    assert "takes no --cost" in capsys.readouterr().err


def test_simulate_breaks_the_summary_down_by_class(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "classes.csv"
    path.write_text("id,arrival_ms,service_ms,priority\nrun,0,10,0\nlow1,0,5,1\nlow2,1,5,1\nurgent,2,5,0\n")
    _, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "2", "--summary-only")
    lines = out.splitlines()
    header = lines.index(
        "class  requests  on time  late  expired  rejected  evicted  p50 wait  p99 wait  p99 end-to-end"
    )
    assert [line.split() for line in lines[header + 2 :]] == [
        ["0", "2", "2", "0", "0", "0", "0", "0", "8", "13"],
        ["1", "2", "1", "0", "0", "0", "1", "1", "15", "20"],
    ]


@pytest.mark.usefixtures("repository")
def test_plot_a_sweep_over_rate_limits_and_a_pure_rate_limiter(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    chart = tmp_path / "limits.svg"
    status, _, _ = run(capsys, *PLAN, "-q", "5", "--rpm", "30,60,120,none", "--plot", str(chart))
    assert status == 0
    svg = chart.read_text()
    assert "rate limits" in svg  # the x axis is the limits, the one thing that varies
    assert "rate limited" in svg
    run_chart = tmp_path / "run.svg"
    status, _, _ = run(capsys, *RATED[:3], "none", *RATED[4:], "--plot", str(run_chart))
    assert status == 0
    assert "max_running=unbounded, max_waiting=3, 60 rpm, 6000 tpm" in run_chart.read_text()


# -- keys -----------------------------------------------------------------------------------------

TENANTS_CSV = (
    "id,arrival_ms,service_ms,budget_ms,key\n"
    + "".join(f"a{i},0,100,250,acme\n" for i in range(1, 7))
    + "g1,0,100,250,globex\ng2,50,100,250,\n"
)


@pytest.fixture
def tenants(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.csv"
    path.write_text(TENANTS_CSV)
    return path


def test_simulate_with_keys_and_an_override_shows_each_key(
    capsys: pytest.CaptureFixture[str], tenants: Path
) -> None:
    status, out, err = run(
        capsys, "simulate", str(tenants), "-c", "2", "-q", "1", "--override", "acme=3,none"
    )
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"8 requests from {tenants} through max_running=2, max_waiting=1, for each of 3 keys; "
        "acme: max_running=3, max_waiting=none"
    )
    assert "a6  acme    completed        0    100  200    100         200" in lines
    assert 'g2  ""      completed       50     50  150      0         100' in lines
    assert "peaks: 5 running, 3 waiting (all keys together)" in lines
    keys = [line.split()[:9] for line in out.split("\n\nkey ")[1].splitlines()[2:]]
    assert keys == [
        ['""', "2", "1", "1", "0", "1", "1", "0", "0"],
        ["acme", "3", "none", "3", "3", "6", "6", "0", "0"],
        ["globex", "2", "1", "1", "0", "1", "1", "0", "0"],
    ]
    assert "key running" not in out  # no trace unless asked
    status, out, _ = run(capsys, "simulate", str(tenants), "-c", "2", "-q", "1", "--trace")
    assert "time  event      id  key     running  waiting  key running  key waiting" in out
    assert "   0  queued     a3  acme          2        1            2            1" in out.splitlines()


def test_simulate_json_with_keys(capsys: pytest.CaptureFixture[str], tenants: Path) -> None:
    status, out, _ = run(
        capsys, "simulate", str(tenants), "-c", "2", "-q", "1", "--override", "acme=3,none", "--json"
    )
    assert status == 0
    data = json.loads(out)
    assert data["overrides"] == {"acme": {"max_running": 3, "max_waiting": None}}
    assert [(k["key"], k["max_running"], k["completed"]) for k in data["summary"]["keys"]] == [
        ("", 2, 1),
        ("acme", 3, 6),
        ("globex", 2, 1),
    ]
    assert data["requests"][0]["key"] == "acme"
    assert "key" not in data["requests"][-1]
    assert {"key_running", "key_waiting"} <= set(data["trace"][0])


def test_a_script_with_one_key_prints_as_before(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("id,arrival_ms,service_ms,key\nA,0,10,acme\nB,0,10,acme\n")
    _, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "1", "--trace", "--override", "acme=2,0")
    assert (
        out.splitlines()[0]
        == f"2 requests from {path} through max_running=1, max_waiting=1; acme: max_running=2, max_waiting=0"
    )
    assert "id  outcome    arrival  start  end  queue  end-to-end" in out
    assert "time  event      id  running  waiting" in out
    assert "max_running  max_waiting  peak running" not in out
    assert "(all keys together)" not in out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("acme", "'acme': give KEY=C,Q"),
        ("acme=4", "'acme=4': give KEY=C,Q"),
        ("acme=0,1", "'acme=0,1': give KEY=C,Q, the running slots (>= 1)"),
        ("acme=1,-1", "'acme=1,-1': give KEY=C,Q"),
        ("acme=1,2,3", "'acme=1,2,3': give KEY=C,Q"),
        ("acme=x,1", "'acme=x,1': give KEY=C,Q"),
    ],
)
def test_bad_overrides_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], tenants: Path, override: str, message: str
) -> None:
    for command in (["simulate", str(tenants)], ["plan", "--script", str(tenants)]):
        with pytest.raises(SystemExit) as caught:
            main([*command, "-c", "1", "-q", "1", "--override", override])
        assert caught.value.code == 2
        assert message in capsys.readouterr().err


def test_an_override_given_twice_fails_and_one_for_no_key_is_noted(
    capsys: pytest.CaptureFixture[str], tenants: Path
) -> None:
    status, _, err = run(
        capsys,
        "simulate",
        str(tenants),
        "-c",
        "1",
        "-q",
        "1",
        "--override",
        "acme=1,1",
        "--override",
        "acme=2,2",
    )
    assert status == 1
    assert err == "boundedgate: error: --override: key 'acme' is given twice\n"
    status, out, err = run(
        capsys, "simulate", str(tenants), "-c", "1", "-q", "1", "--override", "acmee=4,4", "--summary-only"
    )
    assert status == 0
    assert err == "boundedgate: note: --override acmee=...: no request has the key 'acmee'\n"
    assert "acmee: max_running=4, max_waiting=4" in out.splitlines()[0]
    # An empty key is the default key's override.
    _, out, err = run(
        capsys, "simulate", str(tenants), "-c", "1", "-q", "1", "--override", "=5,0", "--summary-only"
    )
    assert err == ""
    assert [line.split()[:3] for line in out.splitlines() if line.startswith('""')] == [['""', "5", "0"]]


def test_plan_with_a_key_mix_and_overrides(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "keys.csv"
    argv = [
        *PLAN,
        "-q",
        "0,4",
        "--key-mix",
        "acme=3,globex=1",
        "--override",
        "globex=8,0",
        "--save-script",
        str(saved),
    ]
    status, out, _ = run(capsys, *argv)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].endswith("; key mix acme=3,globex=1; seed 0")
    assert lines[1] == "Gate: a gate per key (2 keys); globex: max_running=8, max_waiting=0"
    assert "(settings are each key's, but for overrides; --json gives each key's summary)" in lines
    jobs = read_script(saved)
    assert {job.key for job in jobs} == {"acme", "globex"}
    status, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert data["overrides"] == {"globex": {"max_running": 8, "max_waiting": 0}}
    for row in data["rows"]:
        acme, globex = row["summary"]["keys"]
        assert (acme["key"], acme["max_running"], acme["max_waiting"]) == ("acme", 4, row["max_waiting"])
        assert (globex["key"], globex["max_running"], globex["max_waiting"]) == ("globex", 8, 0)
        assert acme["requests"] + globex["requests"] == len(jobs)
        assert globex["rejected"] == 0  # 8 slots for about 5 requests a second of 200 ms or so
    # The same script replayed gives the same rows.
    _, replayed, _ = run(
        capsys, "plan", "--script", str(saved), "-c", "4", "-q", "0,4", "--override", "globex=8,0", "--json"
    )
    assert json.loads(replayed)["rows"] == data["rows"]


def test_plan_replaying_a_script_takes_no_key_mix(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--script", str(seed), "-c", "1", "-q", "1", "--key-mix", "a=1"])
    assert "takes no --key-mix" in capsys.readouterr().err


@pytest.mark.parametrize("mix", ["acme", "acme=-1", "acme=0", "=1", "a=1,a=2", "a=x"])
def test_bad_key_mixes_exit_2(capsys: pytest.CaptureFixture[str], mix: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*PLAN, "-q", "1", "--key-mix", mix])
    assert caught.value.code == 2
    assert f"{mix!r}: give KEY=WEIGHT for each key" in capsys.readouterr().err


# Sizes: what cannot be served is refused at once, naming the option; what can costs what it uses.


@pytest.mark.parametrize(
    ("traffic", "message"),
    [
        (
            ["--rate", "1e9"],
            "Poisson 1e+09/s for 10m would make about 600,000,000,000 requests; plan generates at most "
            "1,000,000: lower --rate, --burst or --duration, or raise --burst-every",
        ),
        (["--burst", "1000000000"], "bursts of 1000000000 at 0ms for 10m would make 1,000,000,000 requests"),
        (
            ["--rate", "1000", "--burst", "1000", "--burst-every", "1s"],
            "Poisson 1000/s + bursts of 1000 at 0ms and every 1.00s for 10m would make about 1,200,000",
        ),
    ],
)
def test_plan_refuses_traffic_too_large_to_simulate(
    capsys: pytest.CaptureFixture[str], traffic: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", *traffic, "--service", "1s", "-c", "1", "-q", "1"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("option", ["--burst", "--priorities"])
def test_whole_number_options_name_themselves(capsys: pytest.CaptureFixture[str], option: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--rate", "1", option, "0", "--service", "1s", "-c", "1", "-q", "1"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"'0': {option} is a whole number >= 1" in err
    assert "max_running" not in err


def test_a_far_priority_or_many_classes_cost_what_the_classes_in_use_cost(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "far.csv"
    path.write_text("id,arrival_ms,service_ms,priority\nA,0,10,1000000\nB,0,10,0\n")
    status, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "1", "--summary-only")
    assert status == 0
    assert "priorities=1000001" in out
    classes = [line.split()[0] for line in out.splitlines()[-4:]]
    assert [classes[0], *classes[2:]] == ["class", "0", "1000000"]
    status, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "1", "--priorities", "100000000")
    assert status == 0
    assert "priorities=100000000" in out


# Input: what a script file can hold is read or refused with a message, never a traceback.


def test_a_utf8_bom_is_read_as_excel_writes_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + SEED_CSV.encode())
    status, out, err = run(capsys, "simulate", str(path), "-c", "2", "-q", "2", "--summary-only")
    assert (status, err) == (0, "")
    assert "peaks: 2 running, 2 waiting" in out


HEADER = b"id,arrival_ms,service_ms"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("utf16.csv", SEED_CSV.encode("utf-16"), "is UTF-16 text: save it as UTF-8"),
        ("binary.csv", bytes(range(256)) * 4, "is not UTF-8 text (invalid start byte at byte 128)"),
        ("nul.csv", HEADER + b"\nA\x00,0,1\n", "line 2: a script holds no NUL characters"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply to be a script"),
        (
            "deep2.json",
            b'[{"id": ' + b"[" * 900 + b"]" * 900 + b', "arrival_ms": 0, "service_ms": 1}]',
            "id must",
        ),
        ("huge.json", b'[{"id": "a", "arrival_ms": 1' + b"0" * 5000 + b', "service_ms": 1}]', "5001 digits"),
        (
            "huge.csv",
            HEADER + b"\na,1" + b"0" * 5000 + b",1\n",
            "line 2 (id 'a'): arrival_ms has",
        ),
        ("late.csv", HEADER + b"\na,1" + b"0" * 20 + b",1\n", "arrival_ms must be <= "),
        ("service.csv", HEADER + b"\na,0,1" + b"0" * 20 + b"\n", "service_ms must be <= "),
        ("cost.csv", HEADER + b",cost\na,0,1,1e400\n", "cost must be a finite"),
        (
            "wide.csv",
            HEADER + b"\n" + b"a" * 200_000 + b",0,1\n",
            "line 2: a cell of more than",
        ),
    ],
)
def test_a_script_that_cannot_be_read_is_refused_with_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    status, out, err = run(capsys, "simulate", str(path), "-c", "1", "-q", "1")
    assert status == 1
    assert out == ""
    assert err.startswith(f"boundedgate: error: {path}")
    assert message in err
    assert len(err) < 500


def test_ids_and_keys_print_with_their_control_characters_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "odd.json"
    jobs = [
        {"id": "\ud800", "arrival_ms": 0, "service_ms": 5, "key": "\x1b[2J\x1b[31mred"},
        {"id": "b\x07", "arrival_ms": 0, "service_ms": 5, "key": "plain"},
    ]
    path.write_text(json.dumps(jobs))
    status, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "1", "--trace")
    assert status == 0
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "\\x1b[2J\\x1b[31mred" in out
    assert "\\ud800" in out
    assert "b\\x07" in out
    out.encode("utf-8")  # no lone surrogate left to fail the terminal's encoding
    status, out, _ = run(capsys, "simulate", str(path), "-c", "1", "-q", "1", "--json")
    assert [r["id"] for r in json.loads(out)["requests"]] == ["\ud800", "b\x07"]


def test_a_quota_is_named_as_given(capsys: pytest.CaptureFixture[str], seed: Path) -> None:
    status, out, _ = run(
        capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--tpm", "1e-300", "--summary-only"
    )
    assert status == 0
    assert "1e-300 tpm (burst 1e-300)" in out
    status, out, _ = run(capsys, "simulate", str(seed), "-c", "2", "-q", "2", "--rpm", "1234.5678")
    assert status == 0
    assert "1234.5678 rpm (burst 1234.5678)" in out


def test_plan_with_feasible_admission_refuses_at_arrival(capsys: pytest.CaptureFixture[str]) -> None:
    main([*PLAN, "-q", "none", "--json"])
    queued = json.loads(capsys.readouterr().out)["rows"][0]["summary"]
    main([*PLAN, "-q", "none", "--feasible", "--json"])
    feasible = json.loads(capsys.readouterr().out)["rows"][0]["summary"]
    assert queued["infeasible"] == 0
    assert queued["expired"] > 0
    assert feasible["infeasible"] > 0  # told at arrival, rather than queued to expire
    assert feasible["expired"] < queued["expired"]
    assert feasible["late"] < queued["late"]
    # It trades a little goodput for that on a heavy tail (it predicts the finish by two mean runs).
    assert feasible["completed"] >= 0.95 * queued["completed"]
    main([*PLAN, "-q", "none", "--feasible"])
    assert "infeasible" in capsys.readouterr().out  # the table shows the outcome when someone had it


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_by_deadline_starts_the_waiter_due_first(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "budgets.csv"
    script.write_text("id,arrival_ms,service_ms,budget_ms\nA,0,100,1000\nB,0,100,1000\nC,1,100,250\n")
    for by_deadline, completed in ((False, 2), (True, 3)):
        flag = ["--by-deadline"] if by_deadline else []
        if command == "simulate":
            main(["simulate", str(script), "-c", "1", "-q", "none", *flag, "--json"])
            summary = json.loads(capsys.readouterr().out)["summary"]
        else:
            main(["plan", "--script", str(script), "-c", "1", "-q", "none", *flag, "--json"])
            summary = json.loads(capsys.readouterr().out)["rows"][0]["summary"]
        # In arrival order C, due at 251, starts at 200 and is late; by deadline it starts at 100.
        assert summary["completed"] == completed


def test_simulate_with_feasible_admission(seed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["simulate", str(seed), "-c", "1", "-q", "none", "--feasible", "--json"])
    assert "infeasible" in json.loads(capsys.readouterr().out)["summary"]
