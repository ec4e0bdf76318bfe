"""Errors of redis-py's connection layer reach callers as ``GateUnavailable``; the gate's own never do.

Some redis-py versions let a torn-down transport's internal error out of a call (``AttributeError:
'NoneType' object has no attribute 'writelines'`` in a cluster failover, ``TypeError: 'NoneType'
object is not callable`` on a peer-reset connection: redis/redis-py#4287). Redis did not answer such
a call: the caller gets ``GateUnavailable``, as for any unreachable Redis. An error raised in the
gate's own code is a defect, and must reach the caller as it is, never hidden as "unreachable".
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio

from boundedgate import GateUnavailable
from boundedgate.redis import _scripts
from boundedgate.redis._io import ClientConnectionFailed, bounded

from .helpers import make_gate, settles_empty

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


class _TornDownTransport:
    """A transport the peer reset, on a Python whose writelines() then fails inside asyncio."""

    _write_ready = None

    def is_closing(self) -> bool:
        return False  # what the leak needs: redis-py's own check finds nothing wrong

    def writelines(self, data: Any) -> None:
        self._write_ready()  # type: ignore[misc]  # TypeError: 'NoneType' object is not callable


class _TornDownWriter:
    """A connection's writer whose transport is torn down; closing it closes the real one."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.transport = _TornDownTransport()

    def writelines(self, data: Any) -> None:
        self.transport.writelines(data)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.real.close()

    async def wait_closed(self) -> None:
        await self.real.wait_closed()


async def _tear_down_idle_connections(client: redis.asyncio.Redis) -> int:
    torn = 0
    for connection in client.connection_pool._available_connections:
        if connection._writer is not None:
            connection._writer = _TornDownWriter(connection._writer)  # type: ignore[assignment]
            torn += 1
    return torn


@pytest.mark.parametrize("how", ["admit", "try_admit", "cluster_stats"])
async def test_a_connection_layer_error_is_gate_unavailable(
    client: redis.asyncio.Redis, name: str, how: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        async with gate.admit(timeout=5):  # the pool has a connection now
            pass
        assert await _tear_down_idle_connections(client) >= 1
        with pytest.raises(GateUnavailable) as caught:
            if how == "admit":
                async with gate.admit(timeout=5):
                    pass
            elif how == "try_admit":
                (await gate.try_admit()).release()
            else:
                await gate.cluster_stats()
        assert caught.value.reason == "unreachable"
        cause = caught.value.__cause__
        assert isinstance(cause, redis.exceptions.ConnectionError)
        assert "redis/redis-py#4287" in str(cause)
        assert isinstance(cause.__cause__, TypeError)
        # The broken connection was dropped: the next call connects anew.
        async with gate.admit(timeout=5):
            pass
        if how != "cluster_stats":
            assert gate.stats().unavailable == 1
        await settles_empty(client, name)


def _defect(value: Any) -> bool:
    return bool(value + "1")  # a TypeError for an int


class _Broken(_scripts.Calls):
    """Calls whose own code fails: a defect of the gate's, raised before anything is sent."""

    @property
    def functions(self) -> bool:
        return _defect(1)

    @functions.setter
    def functions(self, value: bool) -> None:
        pass


async def test_an_error_of_the_gate_s_own_is_not_taken_for_an_unreachable_redis(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        gate._side.calls = _Broken(client)
        with pytest.raises(TypeError, match="unsupported operand"):
            async with gate.admit(timeout=5):
                pass
        assert gate.stats().unavailable == 0


@pytest.mark.engines
async def test_a_cluster_client_s_own_refusal_is_not_blamed_on_the_connection_defect(
    cluster_client: redis.asyncio.RedisCluster,
) -> None:
    # redis-py's cluster errors are not RedisErrors: it raises RedisClusterException (a slot not
    # covered, a call without a key) before sending anything. It counts as unreachable, and says
    # what failed rather than pointing at the torn-down transport's defect.
    with pytest.raises(ClientConnectionFailed) as caught:
        await bounded(cluster_client.execute_command("GET"), 5)  # no key: no slot to send it to
    assert isinstance(caught.value.__cause__, redis.exceptions.RedisClusterException)
    assert "the cluster client failed with RedisClusterException" in str(caught.value)
    assert "4287" not in str(caught.value)
