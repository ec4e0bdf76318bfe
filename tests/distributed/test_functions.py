"""How the scripts reach a server: Redis 7 functions (one library, loaded once), or EVALSHA.

A server with functions is sent the library once and ``FCALL``\\ ed after; one that lost it
(restart, ``FUNCTION FLUSH``) is sent it again; one without functions (before Redis 7, played here
by a server whose ``FCALL`` and ``FUNCTION`` are renamed away, so that it answers "unknown command"
as Redis 6 does), or a client whose ACL refuses them, gets ``EVALSHA``; a cluster client always does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis.asyncio
import redis.exceptions

from boundedgate import GateUnavailable
from boundedgate.redis import RedisGate, _scripts
from boundedgate.redis._io import text
from boundedgate.redis._layout import gate_keys

from .helpers import make_gate, settles_empty, until_queued
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

#: What a server before Redis 7 lacks: its FCALL and FUNCTION answer "unknown command".
NO_FUNCTIONS = ("--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")


@pytest.fixture
def old_server(server_binary: str) -> Iterator[RedisServer]:
    """A server that has no functions, as before Redis 7."""
    server = RedisServer(server_binary, *NO_FUNCTIONS)
    server.start()
    try:
        yield server
    finally:
        server.close()


async def _calls(client: redis.asyncio.Redis) -> dict[str, int]:
    stats = await client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _uses_functions(gate: RedisGate) -> bool:
    return gate._side.calls.functions


async def _libraries(client: redis.asyncio.Redis) -> list[str]:
    names = []
    for entry in await client.function_list():
        fields = [text(field) for field in entry[::2]]
        names.append(text(entry[2 * fields.index("library_name") + 1]))
    return names


async def _contended_pairs(client: redis.asyncio.Redis, name: str) -> None:
    """Uncontended pairs, a hand-off to a waiter, a refusal and a renewal: every script but adapt."""
    async with make_gate(client, name, 1, 1, lease_ttl=0.6) as gate:
        for _ in range(3):
            async with gate.admit(timeout=5):
                pass
        holder = await gate.try_admit()
        waiter = asyncio.create_task(gate.admit(timeout=5).__aenter__())
        await until_queued(waiter, lambda: gate.waiting > 0)
        with pytest.raises(Exception, match="full"):
            await gate.try_admit()
        await asyncio.sleep(0.3)  # a renewal (sync) of the holder's lease
        await gate.set_limits(max_running=1)
        holder.release()
        permit = await asyncio.wait_for(waiter, 5)
        permit.release()
        await settles_empty(client, name)


async def test_a_gate_on_redis_7_calls_the_library_s_functions(own_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        await _contended_pairs(client, name)
        calls = await _calls(client)
        assert await _libraries(client) == [_scripts.LIBRARY.name]
        assert calls.get("function|load") == 1  # once for the server, not once per script
        assert calls.get("fcall", 0) > 10
        assert "evalsha" not in calls
        assert "script|load" not in calls
    finally:
        await client.aclose()


async def test_a_server_without_functions_gets_the_scripts(old_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(old_server.url)
    try:
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            await client.execute_command("FCALL", _scripts.ADMIT.function, 0)  # type: ignore[no-untyped-call]
        await client.config_resetstat()
        await _contended_pairs(client, name)
        calls = await _calls(client)
        assert calls.get("evalsha", 0) > 10
        # The gate found out at its first call, and used EVALSHA from then on.
        assert "fcall" not in calls  # renamed away: an unknown command is not counted as a call
    finally:
        await client.aclose()


async def test_a_gate_turns_to_scripts_once(old_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(old_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            assert _uses_functions(gate)  # until the first call
            async with gate.admit(timeout=5):
                pass
            assert _uses_functions(gate) is False
            await client.config_resetstat()
            for _ in range(5):
                async with gate.admit(timeout=5):
                    pass
            calls = await _calls(client)
            assert calls.get("evalsha") == 10
            assert calls.get("script|load", 0) == 0
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "settings",
    [{}, {"decode_responses": True}, {"single_connection_client": True}],
    ids=["direct", "decoding", "single-connection"],
)
async def test_the_library_is_loaded_again_after_a_function_flush(
    own_server: RedisServer, name: str, settings: dict[str, bool]
) -> None:
    # FUNCTION FLUSH, or a restart without persistence: "Function not found", then a load.
    client = redis.asyncio.Redis.from_url(own_server.url, **settings)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            for _ in range(2):
                await client.function_flush()
                async with gate.admit(timeout=5):
                    pass
                assert await _libraries(client) == [_scripts.LIBRARY.name]
            assert gate._side.calls.functions
            await settles_empty(client, name)
    finally:
        await client.aclose()


async def test_flushall_keeps_the_library(own_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            await client.flushall()
            await client.config_resetstat()
            async with gate.admit(timeout=5):
                pass
            assert "function|load" not in await _calls(client)
    finally:
        await client.aclose()


async def test_the_library_is_loaded_again_after_a_restart(own_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            own_server.kill()
            own_server.start()  # the same port, empty: no library
            checker = redis.asyncio.Redis.from_url(own_server.url)
            try:
                assert await _libraries(checker) == []
                async with gate.admit(timeout=5):
                    pass
                assert await _libraries(checker) == [_scripts.LIBRARY.name]
                await settles_empty(checker, name)
            finally:
                await checker.aclose()
    finally:
        await client.aclose()


async def test_another_version_s_library_stands_beside_this_one(own_server: RedisServer, name: str) -> None:
    # Another boundedgate version's library has another digest, so another name and other
    # function names: loading it replaces nothing of this one, and both work side by side.
    other_admit = _scripts.Script("admit.lua")
    other_admit.own += "\n-- another version\n"
    other = _scripts.Library(other_admit)
    assert other.name != _scripts.LIBRARY.name
    assert other_admit.function != _scripts.ADMIT.function
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            await client.function_load(other.source)  # no REPLACE needed
            assert sorted(await _libraries(client)) == sorted([_scripts.LIBRARY.name, other.name])
            await client.config_resetstat()
            async with gate.admit(timeout=5):
                pass
            assert "function|load" not in await _calls(client)
            keys = gate_keys(f"{name}-other")
            common = _scripts.pack_common((1, 1, 10000, 5000, 30000, 60000, "", "wake:"))
            reply = await client.execute_command(  # type: ignore[no-untyped-call]
                "FCALL", other_admit.function, len(keys), *keys, common, "a#1", -1, 1
            )
            assert reply.split(b"|")[0] == b"1"
    finally:
        await client.aclose()


async def test_a_client_refused_functions_by_its_acl_gets_the_scripts(
    own_server: RedisServer, name: str
) -> None:
    admin = redis.asyncio.Redis.from_url(own_server.url)
    await admin.acl_setuser(
        "scripts-only", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
        commands=["+@all", "-fcall", "-function"],
    )  # fmt: skip
    client = redis.asyncio.Redis.from_url(own_server.url, username="scripts-only", password="secret")
    try:
        await admin.config_resetstat()
        async with make_gate(client, name, 1, 1) as gate:
            for _ in range(3):
                async with gate.admit(timeout=5):
                    pass
            assert not gate._side.calls.functions
        calls = await _calls(admin)
        assert calls.get("evalsha", 0) >= 6
        assert await _libraries(admin) == []
    finally:
        await client.aclose()
        await admin.aclose()


async def test_a_script_s_own_error_is_raised_not_taken_for_a_missing_library(
    own_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            await client.delete(gate_keys(name)[0])
            await client.set(gate_keys(name)[0], "not a hash")  # meta of the wrong type
            await client.config_resetstat()
            with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
                async with gate.admit(timeout=5):
                    pass
            assert gate._side.calls.functions
            assert "function|load" not in await _calls(client)
            await client.delete(gate_keys(name)[0])
    finally:
        await client.aclose()


async def _first_calls_at_once(client: redis.asyncio.Redis, name: str, n: int = 20) -> RedisGate:
    """A fresh gate's first ``n`` admissions, all in flight at once; every one must be admitted."""
    gate = make_gate(client, name, n, n)
    entered = 0

    async def one() -> None:
        nonlocal entered
        async with gate.admit(timeout=10):
            entered += 1

    try:
        results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        assert [r for r in results if r is not None] == []
        assert entered == n
        await settles_empty(client, name)
    finally:
        await gate.aclose()
    return gate


@pytest.fixture
def redis_6_server(redis_6_binary: str) -> Iterator[RedisServer]:
    """A real Redis 6.2 (no functions: FCALL is an unknown command)."""
    server = RedisServer(redis_6_binary)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("server_kind", ["redis-6.2", "renamed"])
async def test_concurrent_first_calls_all_turn_to_the_scripts(
    request: pytest.FixtureRequest, server_kind: str, name: str
) -> None:
    # Every FCALL in flight when the first reply flips the gate to EVALSHA gets "unknown command"
    # too: each must fall back, whoever flipped it, not raise the server's error.
    server: RedisServer = request.getfixturevalue(
        "redis_6_server" if server_kind == "redis-6.2" else "old_server"
    )
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        if server_kind == "redis-6.2":
            assert (await client.info("server"))["redis_version"].startswith("6.2.")
        gate = await _first_calls_at_once(client, name)
        assert not _uses_functions(gate)
    finally:
        await client.aclose()


async def test_concurrent_first_calls_of_a_client_refused_fcall_all_turn_to_the_scripts(
    own_server: RedisServer, name: str
) -> None:
    admin = redis.asyncio.Redis.from_url(own_server.url)
    await admin.acl_setuser(
        "no-fcall", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
        commands=["+@all", "-fcall"],
    )  # fmt: skip
    client = redis.asyncio.Redis.from_url(own_server.url, username="no-fcall", password="secret")
    try:
        gate = await _first_calls_at_once(client, name)
        assert not _uses_functions(gate)
    finally:
        await client.aclose()
        await admin.aclose()


def test_a_cluster_client_keeps_to_the_scripts() -> None:
    # A library would have to be loaded on every primary, as nodes come and go: not done.
    cluster = redis.asyncio.RedisCluster(host="127.0.0.1", port=7000)  # never connected
    assert not _scripts.Calls(cluster).functions
    assert _scripts.Calls(redis.asyncio.Redis()).functions


async def test_a_read_only_replica_fails_closed_and_a_promoted_one_has_the_library(
    server_binary: str, own_server: RedisServer, name: str
) -> None:
    # Functions are replicated with the data: after a failover the new primary has the library.
    replica_server = RedisServer(server_binary)
    replica_server.start()
    primary = redis.asyncio.Redis.from_url(own_server.url)
    replica = redis.asyncio.Redis.from_url(replica_server.url)
    try:
        async with make_gate(primary, name, 1, 1) as gate, gate.admit(timeout=5):
            pass
        # Redis 7 waits repl-diskless-sync-delay (5 s) for more replicas before a full sync: as
        # long as the wait below allowed, on a loaded machine. This primary syncs at once.
        await primary.config_set("repl-diskless-sync-delay", 0)
        await replica.replicaof("127.0.0.1", own_server.port)
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            info = await replica.info("replication")
            if info.get("master_link_status") == "up" and await _libraries(replica):
                break
            await asyncio.sleep(0.01)
        assert await _libraries(replica) == [_scripts.LIBRARY.name]
        async with make_gate(replica, name, 1, 1, op_timeout=1.0) as on_replica:
            with pytest.raises(GateUnavailable):
                async with on_replica.admit(timeout=5):
                    pass
        await replica.replicaof("NO", "ONE")
        await replica.config_resetstat()
        async with make_gate(replica, name, 1, 1) as promoted, promoted.admit(timeout=5):
            pass
        assert "function|load" not in await _calls(replica)
    finally:
        await primary.aclose()
        await replica.aclose()
        replica_server.close()
