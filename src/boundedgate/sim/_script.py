"""Scripts: the requests a simulation replays, read from JSON or CSV and checked row by row.

A script is a list of jobs: one request per row, with an ``id``, an ``arrival_ms``, a
``service_ms`` (how long its body runs once it starts) and an optional ``budget_ms`` (its deadline,
counted from arrival; none if absent), and optionally its ``priority`` class (0, the most urgent,
if absent), its rate ``cost`` (what it declares to the gate's rate limits counted in tokens; 0 if
absent) and its ``actual_cost`` (what it settles when its body ends; nothing is settled if absent),
and its ``key`` (the gate it goes through, as ``KeyedGate.admit(key)``: requests with the same key
share a gate, and an empty or absent key is the default key), and its sizes, ``prompt_tokens`` and
``output_tokens`` (from which ``plan --provider``'s provider derives its time to first token and its
service; none if absent). Times are whole milliseconds, so that
no float rounding ever decides which of two events at the same instant comes first.

Columns are looked up by name in :data:`COLUMNS`, and a column that is not there is an error (a typo
such as ``budget`` must not silently mean "no deadline"). Later columns are added to that table
with a default, as ``priority``, ``cost``, ``key`` and the sizes were, so scripts written before
them keep their meaning.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import reprlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = (
    "COLUMNS",
    "MAX_MS",
    "Job",
    "ScriptError",
    "check_jobs",
    "parse_script",
    "read_script",
    "write_script",
)

_WHOLE = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

#: The latest a time may be, in milliseconds (about 31,700 years): an arrival, a budget and a
#: service time add up to less than 2**53, so every time the simulator computes is exact.
MAX_MS = 10**15
#: The most digits a whole number in a script may have: more is no time, priority or cost.
_MAX_DIGITS = 30

_shown = reprlib.Repr()
_shown.maxlevel = 2
_shown.maxstring = _shown.maxother = 60


def _show(value: object) -> str:
    """``repr(value)``, cut short: a message names a bad value, it does not reprint a file."""
    return _shown.repr(value)


class ScriptError(ValueError):
    """A script that cannot be simulated, with the row at fault.

    Attributes:
        where: The row: ``"line 4"`` of a CSV file, ``"jobs[3]"`` of a JSON one, ``"job 3"`` of a
            list of :class:`Job` (all counted from the file's first line or the list's first item).
        job_id: The id of the request on that row, when it has one.
    """

    def __init__(self, message: str, where: str | None = None, job_id: str | None = None) -> None:
        self.where = where
        self.job_id = job_id
        prefix = where or ""
        if job_id is not None:
            prefix += f" (id {_show(job_id)})"
        super().__init__(f"{prefix}: {message}" if prefix else message)


def _whole(name: str, value: object, minimum: int) -> int:
    if type(value) is not int:  # bool is an int to Python, never a time to us
        kind = "a boolean" if isinstance(value, bool) else _show(value)
        raise TypeError(f"{name} must be a whole number of milliseconds, got {kind}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {_show(value)}")
    if value > MAX_MS:
        raise ValueError(f"{name} must be <= {MAX_MS} (about 31,700 years), got {_show(value)}")
    return value


def _tokens(name: str, value: object) -> None:
    if type(value) is not int:  # bool is an int to Python, never a size to us
        kind = "a boolean" if isinstance(value, bool) else _show(value)
        raise TypeError(f"{name} must be a whole number of tokens, got {kind}")
    if not 0 <= value <= MAX_MS:
        raise ValueError(f"{name} must be >= 0 and <= {MAX_MS}, got {_show(value)}")


def _cost(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "a boolean" if isinstance(value, bool) else _show(value)
        raise TypeError(f"{name} must be a number, got {kind}")
    if not 0 <= value <= sys.float_info.max:  # no NaN, no infinity, no int too large for a float
        raise ValueError(f"{name} must be a finite number >= 0, got {_show(value)}")


@dataclass(frozen=True, slots=True)
class Job:
    """One scripted request, in whole milliseconds.

    Args:
        id: A non-empty string, unique within its script.
        arrival_ms: When it arrives, >= 0.
        service_ms: How long its body runs once it starts, >= 1 (a body that takes no time would
            let one instant start and end requests forever).
        budget_ms: Its budget from arrival, covering the wait and the run, >= 1; None for no
            deadline. Every time is at most :data:`MAX_MS` (about 31,700 years).
        priority: Its priority class, >= 0; 0 is the most urgent (see ``BoundedGate``'s
            ``priorities``).
        cost: Its declared rate cost, a number >= 0: what ``admit(cost=...)`` would declare, taken
            by the rate limits counted in tokens when it starts (a limit counted in requests takes
            1 whatever the cost).
        actual_cost: Its real cost, settled when its body ends, as ``permit.settle(...)`` would:
            the difference to ``cost`` is charged or refunded. None settles nothing.
        key: The gate it goes through (a tenant, a provider), as ``KeyedGate.admit(key)``: jobs
            with the same key share a gate, and each key's gate has the simulation's settings
            and buckets of its own. ``""`` is the default key.
        max_wait_ms: Its queue budget from arrival, >= 0, as ``admit(max_wait=...)``: still queued
            at ``min(arrival + budget, arrival + max_wait)``, it expires; once it runs only the
            budget decides whether it is late. None: it may wait as long as its budget allows.
        prompt_tokens: Its prompt's size in tokens, >= 0; None if not known.
        output_tokens: Its answer's size in tokens, >= 0; None if not known. With both sizes,
            ``plan --provider`` (a :class:`~boundedgate.sim.Request` with its sizes) lets the
            provider derive the request's time to first token and its service from them, at its
            own speeds; ``service_ms`` is then what the gate-only simulation runs the body for.

    Raises:
        TypeError: A field of the wrong type: a time or a size that is not an int (floats,
            strings and booleans included), a cost that is not a number (booleans included), an
            id or a key that is not a str.
        ValueError: An empty id, a time or a size below its minimum, or a cost that is negative
            or not finite.
    """

    id: str
    arrival_ms: int
    service_ms: int
    budget_ms: int | None = None
    priority: int = 0
    cost: float = 0
    actual_cost: float | None = None
    key: str = ""
    max_wait_ms: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise TypeError(f"id must be a string, got {_show(self.id)}")
        if not self.id:
            raise ValueError("id must not be empty")
        _whole("arrival_ms", self.arrival_ms, 0)
        _whole("service_ms", self.service_ms, 1)
        if self.budget_ms is not None:
            _whole("budget_ms", self.budget_ms, 1)
        if type(self.priority) is not int:
            kind = "a boolean" if isinstance(self.priority, bool) else _show(self.priority)
            raise TypeError(f"priority must be a whole number, got {kind}")
        if self.priority < 0:
            raise ValueError(f"priority must be >= 0, got {_show(self.priority)}")
        _cost("cost", self.cost)
        if self.actual_cost is not None:
            _cost("actual_cost", self.actual_cost)
        if not isinstance(self.key, str):
            raise TypeError(f"key must be a string, got {_show(self.key)}")
        if self.max_wait_ms is not None:
            _whole("max_wait_ms", self.max_wait_ms, 0)
        for name in ("prompt_tokens", "output_tokens"):
            if (tokens := getattr(self, name)) is not None:
                _tokens(name, tokens)

    @property
    def deadline_ms(self) -> float:
        """``arrival_ms + budget_ms``, or ``math.inf`` without a budget."""
        return math.inf if self.budget_ms is None else self.arrival_ms + self.budget_ms


def _text(name: str, cell: str) -> object:
    return cell


def _int(name: str, text: str) -> int:
    """A whole number of at most :data:`_MAX_DIGITS` digits, the sign aside."""
    digits = len(text.lstrip("+-"))
    if digits > _MAX_DIGITS:
        raise ValueError(f"{name} has {digits} digits: a script's numbers have at most {_MAX_DIGITS}")
    return int(text)


def _text_time(name: str, cell: str) -> object:
    if _WHOLE.fullmatch(cell):
        return _int(name, cell)
    raise TypeError(f"{name} must be a whole number of milliseconds, got {_show(cell)}")


def _text_optional_time(name: str, cell: str) -> object:
    return None if cell == "" else _text_time(name, cell)


def _text_optional_tokens(name: str, cell: str) -> object:
    if cell == "":
        return None
    if _WHOLE.fullmatch(cell):
        return _int(name, cell)
    raise TypeError(f"{name} must be a whole number of tokens, got {_show(cell)}")


def _text_priority(name: str, cell: str) -> object:
    if cell == "":
        return 0
    if _WHOLE.fullmatch(cell):
        return _int(name, cell)
    raise TypeError(f"{name} must be a whole number, got {_show(cell)}")


def _text_number(cell: str, name: str) -> object:
    if _WHOLE.fullmatch(cell):
        return _int(name, cell)
    if _NUMBER.fullmatch(cell):
        return float(cell)
    raise TypeError(f"{name} must be a number, got {_show(cell)}")


def _text_cost(name: str, cell: str) -> object:
    return 0 if cell == "" else _text_number(cell, name)


def _text_optional_cost(name: str, cell: str) -> object:
    return None if cell == "" else _text_number(cell, name)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a script: its name, whether a row must have it, and how a CSV cell reads."""

    name: str
    required: bool
    from_text: Callable[[str, str], object]


#: The columns a script may have, in the order :func:`write_script` writes them.
COLUMNS: Mapping[str, Column] = {
    column.name: column
    for column in (
        Column("id", True, _text),
        Column("arrival_ms", True, _text_time),
        Column("service_ms", True, _text_time),
        Column("budget_ms", False, _text_optional_time),
        Column("priority", False, _text_priority),
        Column("cost", False, _text_cost),
        Column("actual_cost", False, _text_optional_cost),
        Column("key", False, _text),
        Column("max_wait_ms", False, _text_optional_time),
        Column("prompt_tokens", False, _text_optional_tokens),
        Column("output_tokens", False, _text_optional_tokens),
    )
}


def _job(fields: Mapping[str, Any], where: str, ignore_unknown: bool = False) -> Job:
    # `fields` as read (JSON's values, or CSV cells as their columns read them): Job checks each.
    raw_id = fields.get("id")
    job_id = raw_id if isinstance(raw_id, str) and raw_id else None
    if ignore_unknown:
        fields = {name: value for name, value in fields.items() if name in COLUMNS}
    for name in fields:
        if name not in COLUMNS:
            known = ", ".join(COLUMNS)
            raise ScriptError(f"unknown column {_show(name)} (a script has: {known})", where, job_id)
    for column in COLUMNS.values():
        if column.required and column.name not in fields:
            raise ScriptError(f"missing {column.name}", where, job_id)
    try:
        return Job(**fields)
    except (TypeError, ValueError) as error:
        raise ScriptError(str(error), where, job_id) from None


def check_jobs(jobs: Iterable[Job], rows: Iterable[str] | None = None) -> list[Job]:
    """Return ``jobs`` as a list, checking that each is a :class:`Job` and that ids are unique.

    Args:
        jobs: The script.
        rows: Where each job came from, to name in errors (default ``"job 0"``, ``"job 1"``...).

    Returns:
        The jobs, in their order.

    Raises:
        ScriptError: An item that is not a Job, or an id already used (naming both rows).
    """
    checked: list[Job] = []
    first: dict[str, str] = {}
    names = iter(rows) if rows is not None else None
    for index, job in enumerate(jobs):
        where = next(names) if names is not None else f"job {index}"
        if not isinstance(job, Job):
            raise ScriptError(f"expected a Job, got {job!r}", where)
        if job.id in first:
            raise ScriptError(f"duplicate id (first used at {first[job.id]})", where, job.id)
        first[job.id] = where
        checked.append(job)
    return checked


def _json_int(text: str) -> int:
    return _int("a whole number", text)


def _parse_json(text: str, source: str, ignore_unknown: bool = False) -> list[Job]:
    try:
        data = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as error:
        raise ScriptError(f"not valid JSON: {error}", source) from None
    except ValueError as error:  # from _json_int
        raise ScriptError(str(error), source) from None
    except RecursionError:
        raise ScriptError("nested too deeply to be a script (a list of flat objects)", source) from None
    if isinstance(data, dict) and "jobs" in data:
        data = data["jobs"]
    if not isinstance(data, list):
        raise ScriptError("a JSON script is a list of requests, or an object with a 'jobs' list", source)
    jobs: list[Job] = []
    rows: list[str] = []
    for index, item in enumerate(data):
        where = f"{source}, jobs[{index}]"
        if not isinstance(item, dict):
            raise ScriptError(f"a request is a JSON object, got {_show(item)}", where)
        jobs.append(_job(item, where, ignore_unknown))
        rows.append(where)
    return check_jobs(jobs, rows)


def _csv_rows(text: str, source: str) -> Iterator[tuple[int, list[str]]]:
    """Each row's line number and its cells, stripped; what the csv module refuses, as ScriptError."""
    reader = csv.reader(io.StringIO(text))
    while True:
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            where = f"{source}, line {reader.line_num}"
            if "field limit" in str(error):
                limit = csv.field_size_limit()
                raise ScriptError(f"a cell of more than {limit:,} characters", where) from None
            raise ScriptError(f"not valid CSV: {error}", where) from None
        yield reader.line_num, [cell.strip() for cell in raw]


def _parse_csv(text: str, source: str, ignore_unknown: bool = False) -> list[Job]:
    if (nul := text.find("\x00")) >= 0:  # a binary file, or a UTF-16 one without its BOM
        where = f"{source}, line {text.count(chr(10), 0, nul) + 1}"
        raise ScriptError("a script holds no NUL characters (is it a text file?)", where)
    header: list[str] | None = None
    jobs: list[Job] = []
    rows: list[str] = []
    for line, cells in _csv_rows(text, source):
        if not any(cells):
            continue  # blank lines
        where = f"{source}, line {line}"
        if header is None:
            header = _csv_header(cells, where, ignore_unknown)
            continue
        jobs.append(_job(_csv_fields(header, cells, where), where))
        rows.append(where)
    if header is None:
        raise ScriptError("empty script: a CSV script starts with a header line", source)
    return check_jobs(jobs, rows)


def _csv_header(cells: list[str], where: str, ignore_unknown: bool) -> list[str]:
    """The header line's column names, checked: known (unless ignored), the required ones, once each."""
    for name in cells:
        if name not in COLUMNS and not ignore_unknown:
            known = ", ".join(COLUMNS)
            raise ScriptError(f"unknown column {_show(name)} (a script has: {known})", where)
    for column in COLUMNS.values():
        if column.required and column.name not in cells:
            raise ScriptError(f"no {column.name!r} column", where)
    if len({name for name in cells if name in COLUMNS}) != sum(name in COLUMNS for name in cells):
        raise ScriptError("a column appears twice", where)
    return cells


def _csv_fields(header: list[str], cells: list[str], where: str) -> dict[str, Any]:
    """A row's cells read as its columns' values (an unknown column's left out)."""
    if len(cells) != len(header):
        raise ScriptError(f"{len(cells)} cells for {len(header)} columns", where)
    fields: dict[str, Any] = {}
    job_id = cells[header.index("id")] or None
    for name, cell in zip(header, cells, strict=True):
        if name not in COLUMNS:
            continue  # an unknown column, ignored on request
        try:
            fields[name] = COLUMNS[name].from_text(name, cell)
        except (TypeError, ValueError) as error:
            raise ScriptError(str(error), where, job_id) from None
    return fields


def parse_script(
    text: str, format: Literal["json", "csv"], source: str = "<script>", *, ignore_unknown: bool = False
) -> list[Job]:
    """Read a script from its text.

    JSON: a list of objects (or an object whose ``"jobs"`` is that list), each with the keys of
    :data:`COLUMNS`; times are JSON integers and a missing or null ``budget_ms`` means no deadline.
    CSV: a header line naming the columns, then one request per line; an empty ``budget_ms`` cell
    means no deadline, an empty ``priority`` or ``cost`` cell the default, an empty
    ``actual_cost`` cell nothing to settle, an empty ``key`` cell the default key, an empty
    ``prompt_tokens`` or ``output_tokens`` cell a size not known. Cells are
    stripped of surrounding spaces. A key is a string in both (``"3"``, not ``3``, in JSON).

    Args:
        text: The script.
        format: ``"json"`` or ``"csv"``.
        source: A name for the script in error messages (a file name).
        ignore_unknown: Skip the columns (JSON keys) a script does not have, such as an export's
            own fields, instead of refusing them.

    Returns:
        The jobs, in the script's order.

    Raises:
        ScriptError: Malformed text, an unknown or missing column, a bad value, or a duplicate id;
            the message names the row.
        ValueError: An unknown format.
    """
    if format == "json":
        return _parse_json(text, source, ignore_unknown)
    if format == "csv":
        return _parse_csv(text, source, ignore_unknown)
    raise ValueError(f"format must be 'json' or 'csv', got {format!r}")


def _format_of(path: Path, text: str | None = None) -> Literal["json", "csv"]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix == ".csv":
        return "csv"
    if text is not None and text.lstrip()[:1] in ("[", "{"):
        return "json"
    return "csv"


def read_script(path: str | Path, *, ignore_unknown: bool = False) -> list[Job]:
    """Read a script file: JSON if it ends in ``.json``, CSV if ``.csv``, else by its first character.

    The file is UTF-8, with or without a byte order mark (Excel's "CSV UTF-8" has one).

    Args:
        path: The file.
        ignore_unknown: Skip the columns a script does not have instead of refusing them.

    Returns:
        The jobs, in the file's order.

    Raises:
        ScriptError: The file is not UTF-8 text, or not a valid script (see :func:`parse_script`).
        OSError: The file cannot be read.
    """
    path = Path(path)
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ScriptError("is UTF-16 text: save it as UTF-8", str(path))
    try:
        text = data.decode("utf-8-sig")  # with or without the BOM Excel writes ("CSV UTF-8")
    except UnicodeDecodeError as error:
        raise ScriptError(f"is not UTF-8 text ({error.reason} at byte {error.start})", str(path)) from None
    return parse_script(text, _format_of(path, text), source=str(path), ignore_unknown=ignore_unknown)


def _used(name: str, jobs: Iterable[Job]) -> bool:
    default = Job.__dataclass_fields__[name].default
    return any(getattr(job, name) != default for job in jobs)


def write_script(jobs: Iterable[Job], path: str | Path) -> None:
    """Write ``jobs`` to a script file, JSON if the name ends in ``.json``, else CSV.

    Args:
        jobs: The requests.
        path: The file to create or replace.

    Raises:
        OSError: The file cannot be written.
    """
    path = Path(path)
    jobs = list(jobs)
    # A column that only repeats its default is left out, so a plain script keeps only the basic columns.
    columns = [c.name for c in COLUMNS.values() if c.required or c.name == "budget_ms" or _used(c.name, jobs)]
    rows = [{name: getattr(job, name) for name in columns} for job in jobs]
    if _format_of(path) == "json":
        path.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        return
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow("" if value is None else value for value in row.values())
