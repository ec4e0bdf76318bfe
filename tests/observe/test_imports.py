"""``import boundedgate`` imports neither OpenTelemetry nor prometheus_client: only the extras' modules do."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import boundedgate, boundedgate.sim
g = boundedgate.BoundedGate(max_running=1, max_waiting=0)
g.observe(lambda record: None)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "prometheus_client"))
print(loaded)
"""


def _loaded(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_importing_boundedgate_imports_neither_exporter() -> None:
    assert _loaded(CHECK) == "[]"


def test_the_extras_modules_import_their_own_library() -> None:
    assert "opentelemetry.metrics" in _loaded(
        CHECK.replace("import boundedgate,", "import boundedgate.otel,")
    )
    assert "prometheus_client" in _loaded(
        CHECK.replace("import boundedgate,", "import boundedgate.prometheus,")
    )
