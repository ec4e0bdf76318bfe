"""The layering: the core is pure, and each package imports only the packages below it.

The decision core imports no event loop, no clock and no threads: it is told the time. Above it,
each of boundedgate's packages imports only the packages :data:`MAY_IMPORT` lists, and only their
public face (the package itself, ``boundedgate._core``), never a private module inside another
package (``boundedgate._core._settings``), but for the few :data:`SHARED_PRIVATE` names with the
reason. Inside a package, the modules import each other without a cycle, but for the
:data:`CYCLE_EDGES` allowed with the reason. Every import counts: absolute or relative, at the
top, inside a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import boundedgate

FORBIDDEN = {"asyncio", "anyio", "trio", "time", "threading", "datetime", "selectors", "socket", "random"}

SOURCE = Path(boundedgate.__file__).parent
#: The root package, ``boundedgate`` itself (its ``__init__``), as an importer or a target.
ROOT = ""

#: Which of boundedgate's packages each package may import (each may always import itself).
MAY_IMPORT: dict[str, set[str]] = {
    # The decision core: nothing of boundedgate, and nothing that knows the time or does I/O.
    "_core": set(),
    "_errors": set(),
    # anyio's cancel scopes, asked about only where one can exist.
    "_scopes": set(),
    "_streams": {"_core", "_errors", "_scopes"},
    # The asyncio driver.
    "_driver": {"_core", "_errors", "_scopes", "_streams"},
    "redis": {"_core", "_errors", "_streams", "_driver"},
    # The edges: the HTTP server and client sides, over any gate (the server reads the provider's
    # refusals with the client's parsers of its headers, imported when first needed).
    "asgi": {"_core", "_errors", "_streams", "_driver", "httpx"},
    "httpx": {"_core", "_errors", "_streams", "_driver", "_downstream"},
    "aiohttp": {"_core", "_errors", "_streams", "_driver", "_downstream", "httpx"},
    # The simulator replays the core alone: never the asyncio driver.
    "sim": {"_core"},
    # The command line is the simulator's; the root package only for __version__.
    "_cli": {"_core", "sim", ROOT},
    # The downstream refusal counts (a provider's 429s): told by the edges, read by the exports.
    "_downstream": set(),
    # What the metrics exports share: the gates' snapshots and the records' histograms; a cluster
    # gate's feed of the cluster's numbers (imported only when a RedisGate is given: an extra).
    "_export": {"_core", "_driver", "redis"},
    # The ready Grafana dashboard and alerting rules (data files; the module only names them).
    "dashboards": set(),
    # The optional exports (extras): the only modules that import OpenTelemetry or prometheus_client.
    # (boundedgate.redis: only for the type of the gates they take, under TYPE_CHECKING.)
    "otel": {"_core", "_driver", "_downstream", "_export", "redis", ROOT},
    "prometheus": {"_core", "_driver", "_downstream", "_export", "redis"},
    # BOUNDEDGATE_NO_EXTENSIONS: the finder of the sources, installed by the root package first.
    "_pure": set(),
    ROOT: {"_pure", "_core", "_errors", "_streams", "_driver", "_downstream"},
    "__main__": {"_cli"},
}
#: What a package may take from the root package (its public names are the driver's too).
FROM_ROOT = {"_cli": {"__version__"}, "otel": {"__version__"}}

#: Private modules of another package that a package imports, and why.
SHARED_PRIVATE: dict[str, dict[str, str]] = {
    "_cli": {
        "sim._plot": "the command line draws the simulator's charts",
        "sim._results": "and prints its results",
        "sim._script": "and reads its scripts' limits",
        "sim._text": "and its tables",
        "sim._workload": "and reads its workloads",
    },
    "_driver": {"_streams._handing": "a permit hands its slot over to a stream"},
    "_export": {
        "redis._metrics": "the exports read a cluster gate's feed of the cluster's numbers",
        "redis._keyed_metrics": "and a cluster keyed gate's feed of the processes' sums",
    },
    "aiohttp": {
        "httpx._admission": "the aiohttp middleware admits as the httpx transport does",
        "httpx._exchange": "records each exchange as it does",
        "httpx._signals": "reads the provider's signals as it does",
        "httpx._transport": "and tells retries apart by the same header",
    },
}


#: Imports inside a package that may close a cycle, and why: (importer, imported), both dotted
#: names under ``boundedgate``. At most one pair belongs here for good (a container and its element
#: typed for each other); an entry whose import is gone, or closes no cycle, fails a test.
CYCLE_EDGES: dict[tuple[str, str], str] = {
    # Type-only, for good: Permit.gate is the public BoundedGate, the gate module's one subclass (a
    # container and its element, as h11's _events and _headers).
    ("_driver._gate", "_driver._bounded"): "Permit.gate is typed as the public BoundedGate",
}


def _package_of(path: Path) -> tuple[list[str], str]:
    """The module's package, as parts under boundedgate, and the top-level package it belongs to."""
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    package = parts[:-1]
    return package, package[0] if package else ROOT


def _is_module(dotted: str) -> bool:
    where = SOURCE.parent.joinpath(*dotted.split("."))
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def imports(path: Path, text: str | None = None) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """Every module ``path`` imports (its code, or ``text`` as if it were), as absolute dotted names.

    Each with the import's line and the names it takes (none for ``import X``). ``from X import
    Y`` imports ``X``, or ``X.Y`` when ``Y`` is a module.
    """
    package, _ = _package_of(path)
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["boundedgate", *package][: len(package) + 2 - node.level]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = tuple(alias.name for alias in node.names)
            modules = tuple(name for name in names if _is_module(f"{module}.{name}"))
            if len(modules) < len(names):  # names from X itself, not only modules inside it
                yield node.lineno, module, tuple(name for name in names if name not in modules)
            for name in modules:
                yield node.lineno, f"{module}.{name}", ()


def _sources() -> list[Path]:
    return sorted(SOURCE.rglob("*.py"))


def test_core_imports_nothing_that_knows_the_time_or_does_io() -> None:
    files = sorted((SOURCE / "_core").glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for line, module, _ in imports(path):
            root = module.split(".")[0]
            assert root not in FORBIDDEN, f"{path.name}:{line} imports {module}"


def test_every_package_is_in_the_table() -> None:
    tops = {_package_of(path)[1] for path in _sources()} | {path.stem for path in SOURCE.glob("*.py")}
    tops -= {"__init__"}
    assert tops | {ROOT} == set(MAY_IMPORT)


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(SOURCE)))
def test_each_module_imports_only_the_packages_below_it_and_only_their_public_face(path: Path) -> None:
    _, own = _package_of(path)
    if path.parent == SOURCE and path.stem != "__init__":
        own = path.stem  # a top-level module, such as _errors, is a package of its own here
    for problem in _problems(own, imports(path)):
        pytest.fail(f"{path.relative_to(SOURCE)}:{problem}")


def _problems(own: str, found: Iterator[tuple[int, str, tuple[str, ...]]]) -> Iterator[str]:
    """What breaks the rules among the imports ``found`` in a module of package ``own``."""
    allowed = MAY_IMPORT[own]
    shared = SHARED_PRIVATE.get(own, {})
    for line, module, names in found:
        parts = module.split(".")
        if parts[0] != "boundedgate":
            continue
        target = parts[1] if len(parts) > 1 else ROOT
        where = f"{line} imports {module}"
        if target == own and own != ROOT:
            continue
        if target not in allowed:
            yield f"{where}: {own or 'boundedgate'} may import only {sorted(allowed)}"
        elif target == ROOT and own in FROM_ROOT and not set(names) <= FROM_ROOT[own]:
            yield f"{where}: {own} takes only {sorted(FROM_ROOT[own])} from the root package"
        elif any(part.startswith("_") for part in parts[2:]) and ".".join(parts[1:]) not in shared:
            yield f"{where}: a private module of another package"


@pytest.mark.parametrize(
    ("own", "code", "problem"),
    [
        ("sim", "from .._driver import GateLimits", "1 imports boundedgate._driver: sim may import only"),
        ("sim", "import boundedgate._driver._keyed", "imports boundedgate._driver._keyed: sim may import"),
        ("sim", "def f():\n    from .. import _driver", "2 imports boundedgate._driver: sim may import"),
        ("sim", "from .._core._settings import check_priorities", "a private module of another package"),
        ("sim", "from .._core import _settings", "imports boundedgate._core._settings: a private module"),
        ("_core", "from .._errors import Late", "imports boundedgate._errors: _core may import only []"),
        ("_cli", "from .. import BoundedGate", "_cli takes only ['__version__'] from the root package"),
        ("sim", "from .._core import GateLimits\nfrom . import _script", None),
    ],
)
def test_the_rules_see_relative_lazy_and_private_imports(own: str, code: str, problem: str | None) -> None:
    path = SOURCE / own / "_example.py"
    found = list(_problems(own, imports(path, code)))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1
        assert problem in found[0]


def _module_of(path: Path) -> str:
    """The dotted name of the module at ``path`` under ``boundedgate`` (a package is its ``__init__``)."""
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Each module's imports of modules of its own package, from the modules' code by dotted name.

    A package's own module (its ``__init__``) belongs to it, beside its modules; a subpackage is a
    package of its own.
    """

    def package(module: str) -> str:
        return module.rpartition(".")[0]

    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, text in sources.items():
        path = SOURCE.joinpath(*module.split(".")) if module else SOURCE
        path = (
            path / "__init__.py" if (path / "__init__.py").exists() or not module else path.with_suffix(".py")
        )
        home = module if path.stem == "__init__" else package(module)
        for _, imported, names in imports(path, text):
            if imported != "boundedgate" and not imported.startswith("boundedgate."):
                continue
            target = imported.partition(".")[2]
            # `from . import x`: the module x when there is one by that name, else the package.
            found = {f"{target}.{name}" for name in names} & sources.keys() or {target}
            graph[module] |= {t for t in found if t != module and t in sources and home in (t, package(t))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected set of modules, sorted (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _source_graph() -> dict[str, set[str]]:
    return import_graph({_module_of(path): path.read_text() for path in _sources()})


def test_no_package_has_an_import_cycle_but_the_edges_allowed() -> None:
    graph = _source_graph()
    for importer, imported in CYCLE_EDGES:
        graph[importer].discard(imported)
    found = cycles(graph)
    assert not found, (
        "import cycles inside a package (break them, or allow an edge in CYCLE_EDGES): "
        + "; ".join(" <-> ".join(component) for component in found)
    )


def test_every_edge_allowed_into_a_cycle_is_an_import_that_closes_one() -> None:
    graph = _source_graph()
    found = cycles(graph)
    for importer, imported in CYCLE_EDGES:
        assert imported in graph[importer], (
            f"{importer} no longer imports {imported}: drop it from CYCLE_EDGES"
        )
        closes = any(importer in component and imported in component for component in found)
        assert closes, f"{importer} -> {imported} closes no cycle: drop it from CYCLE_EDGES"


@pytest.mark.parametrize(
    ("code", "cycle"),
    [
        ("from ._b import x", ["_driver._a", "_driver._b"]),
        ("def f():\n    from . import _b", ["_driver._a", "_driver._b"]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import x",
            ["_driver._a", "_driver._b"],
        ),
        ("import boundedgate._driver._b", ["_driver._a", "_driver._b"]),
        ("from .._core._b import x", None),
        ("from . import x", ["_driver", "_driver._a", "_driver._b"]),
        ("import os", None),
    ],
)
def test_a_cycle_is_seen_through_lazy_type_only_and_package_imports(
    code: str, cycle: list[str] | None
) -> None:
    # _b imports _a back: an import of _b by _a (or of the package, whose __init__ imports _b) closes one.
    found = cycles(
        import_graph(
            {
                "_driver": "from . import _b",
                "_driver._a": code,
                "_driver._b": "from ._a import y",
                "_core._b": "",
            }
        )
    )
    assert found == ([] if cycle is None else [cycle])


def test_the_simulator_runs_without_the_asyncio_driver() -> None:
    # What the table says, seen from the running interpreter: importing the simulator's modules
    # alone (not through boundedgate/__init__) loads no boundedgate._driver.
    import subprocess
    import sys

    code = (
        "import sys, importlib.util, types\n"
        f"root = types.ModuleType('boundedgate'); root.__path__ = [{str(SOURCE)!r}]\n"
        "sys.modules['boundedgate'] = root\n"
        "import boundedgate.sim._engine, boundedgate.sim._plan, boundedgate.sim._results\n"
        "print(sorted(m for m in sys.modules if m.startswith('boundedgate._driver') or m == 'asyncio'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


#: All a key's state may ask of the keyed gate that owns it (see ``_driver/_keys.py``): its owner is
#: typed as the keyed gate's base, so that compiled code calls it natively, and this list keeps the
#: collaboration as narrow as a Protocol would.
KEY_OWNER_METHODS = {"_arrived_idle", "_changed", "_freed", "_settle_retired", "_charged_idle"}


def _owner_uses(source: str) -> set[str]:
    tree = ast.parse(source)
    state = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KeyState")
    return {
        node.attr
        for node in ast.walk(state)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "owner"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }


def test_a_key_state_asks_its_owner_only_the_methods_of_the_collaboration() -> None:
    source = (SOURCE / "_driver" / "_keys.py").read_text()
    assert _owner_uses(source) == KEY_OWNER_METHODS


def test_the_owner_check_sees_a_use_outside_the_collaboration() -> None:
    source = (
        "class KeyState:\n"
        "    def f(self):\n"
        "        self.owner._changed(self)\n"
        "        self.owner._gates.clear()\n"
    )
    assert _owner_uses(source) == {"_changed", "_gates"}
