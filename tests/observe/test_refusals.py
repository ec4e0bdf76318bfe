"""What the exports refuse, and that each refusal names the way out (the API to use, or the docs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from boundedgate import BoundedGate, KeyedGate
from boundedgate.otel import instrument
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisGate

EXPORTS: dict[str, Callable[..., Any]] = {"GateCollector": GateCollector, "instrument": instrument}


def _gate(name: str = "openai") -> BoundedGate:
    return BoundedGate(max_running=1, max_waiting=0, name=name)


@pytest.mark.parametrize("export", EXPORTS)
def test_a_redis_gate_is_taken_beside_in_process_gates(export: str) -> None:
    cluster = RedisGate(None, max_running=1, max_waiting=1, name="api")  # no call is made: no client
    made = EXPORTS[export](_gate(), cluster)
    made.close()


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("given", [list, tuple])
def test_gates_in_a_list_are_refused_with_how_to_pass_them(export: str, given: type) -> None:
    with pytest.raises(TypeError, match=rf"^{export}\(\) takes each gate as an argument") as refused:
        EXPORTS[export](given([_gate("a"), _gate("b")]))
    assert f"{export}(*gates)" in str(refused.value)


@pytest.mark.parametrize("export", EXPORTS)
def test_a_key_of_a_keyed_gate_is_refused_with_how_it_is_exported(export: str) -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenants")
    with pytest.raises(TypeError, match=rf"^{export}\(\) exports a KeyedGate whole") as refused:
        EXPORTS[export]((keyed, "acme"))
    assert "pass the KeyedGate itself" in str(refused.value)


@pytest.mark.parametrize("export", EXPORTS)
def test_anything_else_is_refused_with_where_the_docs_are(export: str) -> None:
    expected = rf"^{export}\(\) takes BoundedGate, KeyedGate, RedisGate and RedisKeyedGate objects"
    with pytest.raises(TypeError, match=expected) as refused:
        EXPORTS[export]("openai")
    assert "got 'openai'" in str(refused.value)
    assert 'docs/metrics.md, "Metrics, traces and logs"' in str(refused.value)
