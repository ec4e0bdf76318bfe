"""Scripts in JSON and CSV: what they accept, and errors that name the row at fault."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from boundedgate import Status
from boundedgate.sim import Job, ScriptError, parse_script, read_script, simulate, write_script
from boundedgate.sim._script import MAX_MS

SEED_CSV = """id,arrival_ms,service_ms,budget_ms
A,0,100,300
B,0,100,300
C,0,50,200
D,0,50,90
E,0,20,200
"""

SEED = [
    Job("A", 0, 100, 300),
    Job("B", 0, 100, 300),
    Job("C", 0, 50, 200),
    Job("D", 0, 50, 90),
    Job("E", 0, 20, 200),
]


def test_csv_reads_the_seeds_jobs() -> None:
    assert parse_script(SEED_CSV, "csv") == SEED


def test_json_reads_a_list_or_an_object_with_jobs() -> None:
    rows = [
        {"id": j.id, "arrival_ms": j.arrival_ms, "service_ms": j.service_ms, "budget_ms": j.budget_ms}
        for j in SEED
    ]
    assert parse_script(json.dumps(rows), "json") == SEED
    assert parse_script(json.dumps({"jobs": rows}), "json") == SEED


def test_budget_is_optional() -> None:
    assert parse_script("id,arrival_ms,service_ms\nA,0,5\n", "csv") == [Job("A", 0, 5)]
    assert parse_script("id,arrival_ms,service_ms,budget_ms\nA,0,5,\n", "csv") == [Job("A", 0, 5, None)]
    jobs = parse_script(
        '[{"id": "A", "arrival_ms": 0, "service_ms": 5, "budget_ms": null},'
        ' {"id": "B", "arrival_ms": 1, "service_ms": 5}]',
        "json",
    )
    assert [j.deadline_ms for j in jobs] == [math.inf, math.inf]


def test_csv_cells_are_stripped_and_blank_lines_skipped() -> None:
    assert parse_script(" id , arrival_ms , service_ms \n\n A , 0 , 5 \n\n", "csv") == [Job("A", 0, 5)]


def test_columns_may_come_in_any_order() -> None:
    assert parse_script("service_ms,budget_ms,id,arrival_ms\n5,7,A,1\n", "csv") == [Job("A", 1, 5, 7)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "id,arrival_ms,service_ms\nA,0,5\nB,-1,5\n",
            r"<script>, line 3 \(id 'B'\): arrival_ms must be >= 0, got -1",
        ),
        (
            "id,arrival_ms,service_ms\nA,0,5\nB,1.5,5\n",
            r"line 3 \(id 'B'\): arrival_ms must be a whole number of milliseconds, got '1.5'",
        ),
        ("id,arrival_ms,service_ms\nA,0,0\n", r"line 2 \(id 'A'\): service_ms must be >= 1, got 0"),
        (
            "id,arrival_ms,service_ms,budget_ms\nA,0,1,0\n",
            r"line 2 \(id 'A'\): budget_ms must be >= 1, got 0",
        ),
        (
            "id,arrival_ms,service_ms\nA,0,True\n",
            r"line 2 \(id 'A'\): service_ms must be a whole number of milliseconds, got 'True'",
        ),
        (
            "id,arrival_ms,service_ms\nA,0,5\nB,1,5\nA,2,5\n",
            r"line 4 \(id 'A'\): duplicate id \(first used at <script>, line 2\)",
        ),
        ("id,arrival_ms,service_ms\n,0,5\n", r"line 2: id must not be empty"),
        ("id,arrival_ms,service_ms\nA,0\n", r"line 2: 2 cells for 3 columns"),
        (
            "id,arrival_ms,budget\nA,0,5\n",
            r"line 1: unknown column 'budget' "
            r"\(a script has: id, arrival_ms, service_ms, budget_ms, priority, cost, actual_cost, key, "
            r"max_wait_ms, prompt_tokens, output_tokens\)",
        ),
        ("id,arrival_ms\nA,0\n", r"line 1: no 'service_ms' column"),
        ("id,arrival_ms,service_ms,id\nA,0,5,B\n", r"a column appears twice"),
        ("", r"empty script"),
    ],
)
def test_csv_errors_name_the_row(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "csv")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"id": "A", "arrival_ms": True, "service_ms": 5},
            r"jobs\[1\] \(id 'A'\): arrival_ms must be a whole number of milliseconds, got a boolean",
        ),
        (
            {"id": "A", "arrival_ms": 0, "service_ms": 5.0},
            r"jobs\[1\] \(id 'A'\): service_ms must be a whole number of milliseconds, got 5.0",
        ),
        (
            {"id": "A", "arrival_ms": 0, "service_ms": "5"},
            r"service_ms must be a whole number of milliseconds, got '5'",
        ),
        (
            {"id": "A", "arrival_ms": -3, "service_ms": 5},
            r"jobs\[1\] \(id 'A'\): arrival_ms must be >= 0, got -3",
        ),
        (
            {"id": "A", "arrival_ms": 0, "service_ms": 5, "budget_ms": False},
            r"budget_ms must be a whole number of milliseconds, got a boolean",
        ),
        ({"id": 7, "arrival_ms": 0, "service_ms": 5}, r"jobs\[1\]: id must be a string, got 7"),
        ({"id": "A", "service_ms": 5}, r"jobs\[1\] \(id 'A'\): missing arrival_ms"),
        ({"id": "A", "arrival_ms": 0, "service_ms": 5, "tenant": "x"}, r"unknown column 'tenant'"),
        (
            {"id": "Z", "arrival_ms": 0, "service_ms": 5},
            r"jobs\[1\] \(id 'Z'\): duplicate id \(first used at <script>, jobs\[0\]\)",
        ),
        ("A,0,5", r"jobs\[1\]: a request is a JSON object"),
    ],
)
def test_json_errors_name_the_row(item: object, message: str) -> None:
    text = json.dumps([{"id": "Z", "arrival_ms": 0, "service_ms": 1}, item])
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "json")


def test_json_that_is_not_a_script() -> None:
    with pytest.raises(ScriptError, match="not valid JSON"):
        parse_script("[{", "json")
    with pytest.raises(ScriptError, match="a JSON script is a list"):
        parse_script('{"requests": []}', "json")


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="format"):
        parse_script("", "yaml")  # type: ignore[arg-type]


def test_script_error_carries_the_row_and_id() -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script("id,arrival_ms,service_ms\nA,0,0\n", "csv", source="traffic.csv")
    assert caught.value.where == "traffic.csv, line 2"
    assert caught.value.job_id == "A"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (("A", True, 1), TypeError),
        (("A", 0, 1.0), TypeError),
        (("A", 0, 0), ValueError),
        (("A", -1, 1), ValueError),
        (("A", 0, 1, 0), ValueError),
        (("", 0, 1), ValueError),
        ((None, 0, 1), TypeError),
        (("A", 10**15 + 1, 1), ValueError),
        (("A", 0, 10**400), ValueError),
        (("A", 0, 1, 10**15 + 1), ValueError),
        (("A", 0, 1, None, 0, 10**400), ValueError),
        (("A", 0, 1, None, 0, 1, 10**400), ValueError),
        (("A", 0, 1, None, 0, 1e309), ValueError),
    ],
)
def test_a_job_cannot_be_built_invalid(fields: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        Job(*fields)  # type: ignore[arg-type]


def test_a_job_at_the_latest_times_is_simulated() -> None:
    job = Job("A", MAX_MS, MAX_MS, MAX_MS, 0, 10**300)
    [row] = simulate([job], max_running=1, max_waiting=0).requests
    assert (row.outcome, row.end_ms) == (Status.LATE, 2 * MAX_MS)


@pytest.mark.parametrize("name", ["script.csv", "script.json", "script.txt"])
def test_write_then_read_round_trips(tmp_path: Path, name: str) -> None:
    jobs = [*SEED, Job("F", 7, 3)]
    write_script(jobs, tmp_path / name)
    assert read_script(tmp_path / name) == jobs


def test_read_sniffs_json_without_a_suffix(tmp_path: Path) -> None:
    path = tmp_path / "script"
    path.write_text('[{"id": "A", "arrival_ms": 0, "service_ms": 5}]')
    assert read_script(path) == [Job("A", 0, 5)]


def test_read_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("id,arrival_ms,service_ms\nA,0,5\nB,x,5\n")
    with pytest.raises(ScriptError, match=r"bad.csv, line 3 \(id 'B'\)"):
        read_script(path)


def test_the_priority_column_is_optional_and_defaults_to_the_most_urgent_class() -> None:
    jobs = parse_script("id,arrival_ms,service_ms,priority\nA,0,5,2\nB,0,5,\n", "csv")
    assert [j.priority for j in jobs] == [2, 0]
    one = parse_script('[{"id": "A", "arrival_ms": 0, "service_ms": 5, "priority": 1}]', "json")
    assert one[0].priority == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "id,arrival_ms,service_ms,priority\nA,0,5,-1\n",
            r"line 2 \(id 'A'\): priority must be >= 0, got -1",
        ),
        (
            "id,arrival_ms,service_ms,priority\nA,0,5,high\n",
            r"line 2 \(id 'A'\): priority must be a whole number, got 'high'",
        ),
    ],
)
def test_bad_priorities_name_the_row(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "csv")
    with pytest.raises(TypeError, match="priority must be a whole number, got a boolean"):
        Job("A", 0, 1, None, True)


def test_write_script_keeps_seed_000s_columns_unless_a_priority_is_used(tmp_path: Path) -> None:
    write_script(SEED, tmp_path / "plain.csv")
    assert (tmp_path / "plain.csv").read_text().splitlines()[0] == "id,arrival_ms,service_ms,budget_ms"
    jobs = [*SEED, Job("F", 7, 3, None, 1)]
    for name in ("mixed.csv", "mixed.json"):
        write_script(jobs, tmp_path / name)
        assert read_script(tmp_path / name) == jobs
    header = (tmp_path / "mixed.csv").read_text().splitlines()[0]
    assert header == "id,arrival_ms,service_ms,budget_ms,priority"


def test_cost_columns_are_optional_numbers() -> None:
    text = "id,arrival_ms,service_ms,cost,actual_cost\nA,0,5,1500,1200\nB,0,5,,\nC,0,5,2.5,0\nD,0,5,1e3,.5\n"
    jobs = parse_script(text, "csv")
    assert [(j.cost, j.actual_cost) for j in jobs] == [(1500, 1200), (0, None), (2.5, 0), (1000.0, 0.5)]
    assert parse_script("id,arrival_ms,service_ms\nA,0,5\n", "csv")[0].cost == 0
    one = parse_script(
        '[{"id": "A", "arrival_ms": 0, "service_ms": 5, "cost": 2000, "actual_cost": null},'
        ' {"id": "B", "arrival_ms": 0, "service_ms": 5, "cost": 0.5, "actual_cost": 3}]',
        "json",
    )
    assert [(j.cost, j.actual_cost) for j in one] == [(2000, None), (0.5, 3)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "id,arrival_ms,service_ms,cost\nA,0,5,-1\n",
            r"line 2 \(id 'A'\): cost must be a finite number >= 0, got -1",
        ),
        (
            "id,arrival_ms,service_ms,cost\nA,0,5,True\n",
            r"line 2 \(id 'A'\): cost must be a number, got 'True'",
        ),
        (
            "id,arrival_ms,service_ms,cost\nA,0,5,nan\n",
            r"line 2 \(id 'A'\): cost must be a number, got 'nan'",
        ),
        (
            "id,arrival_ms,service_ms,cost\nA,0,5,1e999\n",
            r"line 2 \(id 'A'\): cost must be a finite number >= 0",
        ),
        (
            "id,arrival_ms,service_ms,actual_cost\nA,0,5,lots\n",
            r"line 2 \(id 'A'\): actual_cost must be a number, got 'lots'",
        ),
    ],
)
def test_bad_costs_in_csv_name_the_row(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "csv")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cost": True}, r"jobs\[1\] \(id 'A'\): cost must be a number, got a boolean"),
        ({"cost": "5"}, r"cost must be a number, got '5'"),
        ({"cost": None}, r"cost must be a number, got None"),
        ({"cost": -0.5}, r"cost must be a finite number >= 0, got -0.5"),
        ({"actual_cost": False}, r"actual_cost must be a number, got a boolean"),
        ({"actual_cost": -2}, r"actual_cost must be a finite number >= 0, got -2"),
    ],
)
def test_bad_costs_in_json_name_the_row(fields: dict[str, object], message: str) -> None:
    text = json.dumps(
        [
            {"id": "Z", "arrival_ms": 0, "service_ms": 1},
            {"id": "A", "arrival_ms": 0, "service_ms": 5, **fields},
        ]
    )
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "json")
    with pytest.raises((TypeError, ValueError)):
        Job("A", 0, 5, **fields)  # type: ignore[arg-type]


def test_write_script_adds_cost_columns_only_when_used(tmp_path: Path) -> None:
    jobs = [Job("A", 0, 5, None, 0, 1500, 1200), Job("B", 1, 5, 100, 0, 2.5), Job("C", 2, 5)]
    for name in ("costs.csv", "costs.json"):
        write_script(jobs, tmp_path / name)
        assert read_script(tmp_path / name) == jobs
    header = (tmp_path / "costs.csv").read_text().splitlines()[0]
    assert header == "id,arrival_ms,service_ms,budget_ms,cost,actual_cost"
    write_script([Job("A", 0, 5, None, 0, 3)], tmp_path / "cost.csv")
    assert (tmp_path / "cost.csv").read_text().splitlines()[0] == "id,arrival_ms,service_ms,budget_ms,cost"


def test_sizes_are_optional_columns_written_only_when_used(tmp_path: Path) -> None:
    jobs = [Job("A", 0, 5, 100, prompt_tokens=1500, output_tokens=250), Job("B", 1, 5, 100)]
    for name in ("sized.csv", "sized.json"):
        write_script(jobs, tmp_path / name)
        assert read_script(tmp_path / name) == jobs
    header = (tmp_path / "sized.csv").read_text().splitlines()[0]
    assert header == "id,arrival_ms,service_ms,budget_ms,prompt_tokens,output_tokens"
    write_script([Job("A", 0, 5)], tmp_path / "plain.csv")  # an unsized script keeps its columns
    assert (tmp_path / "plain.csv").read_text().splitlines()[0] == "id,arrival_ms,service_ms,budget_ms"
    text = "id,arrival_ms,service_ms,prompt_tokens,output_tokens\nA,0,5,,\nB,0,5,800,0\n"
    assert [(j.prompt_tokens, j.output_tokens) for j in parse_script(text, "csv")] == [(None, None), (800, 0)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "id,arrival_ms,service_ms,prompt_tokens\nA,0,5,1.5\n",
            "line 2 .*prompt_tokens must be a whole number",
        ),
        ("id,arrival_ms,service_ms,output_tokens\nA,0,5,-1\n", "line 2 .*output_tokens must be >= 0"),
    ],
)
def test_bad_sizes_name_the_row(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(text, "csv")


@pytest.mark.parametrize("size", [True, 1.0, "3", -1])
def test_a_job_refuses_a_size_that_is_not_a_whole_number_of_tokens(size: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        Job("A", 0, 5, prompt_tokens=size)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError)):
        Job("A", 0, 5, output_tokens=size)  # type: ignore[arg-type]
