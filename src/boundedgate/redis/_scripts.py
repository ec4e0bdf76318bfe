"""The Lua scripts, loaded from the package's ``lua/`` folder: Redis 7 functions, or EVALSHA.

Each script is ``prelude.lua`` and its own file. They reach a server one of two ways:

* as **functions** of one library (:data:`LIBRARY`, ``FUNCTION LOAD`` once per server, ``FCALL``
  per call), from Redis 7 on: the prelude's helpers and constants are made once when the library
  loads, and a call only fills in its per-call state (``begin()``) and runs its own part. A server
  that answers "Function not found" (it restarted without persistence, is another server, or had
  ``FUNCTION FLUSH``) is sent the library and asked again. Functions are replicated and persisted
  with the data, so a promoted replica has them; ``FLUSHALL`` keeps them.
* as **scripts** (``EVALSHA``, the whole prelude run on every call), for servers before Redis 7,
  which answer "unknown command" to ``FCALL``, for a client whose ACL refuses ``FCALL`` or
  ``FUNCTION LOAD``, and for cluster clients (a library must be loaded on every primary, and a
  cluster's nodes come and go: not done here). A server that does not know a script is sent
  ``SCRIPT LOAD`` once and asked again.

Each gate finds out once which way its server takes (:class:`Calls`), by its first ``FCALL``:
nothing is asked beforehand. The library's name and its functions' carry a digest of its source
(``boundedgate_<digest>``, functions ``boundedgate_<digest>_admit``, ...): two versions of
boundedgate on one server load two libraries side by side, and neither replaces the other's
functions while its calls are in flight (old libraries stay until ``FUNCTION DELETE``; each is
some tens of kB).

The scripts of the admission path (admit, release, cancel) are sent *directly* through a plain
``redis.asyncio.Redis`` client's pool: the command is packed here, from a head encoded once per gate,
and sent and read on a pooled connection with the connection's own methods, not through
``execute_command`` (its retry wrapper, observability records and argument encoding cost a call
more than the script's own work in the client). Any failure to reach Redis goes through
``execute_command`` after all, so its retries and reconnection have the last word; a cluster client,
a single-connection client or a subclass always takes that path.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import weakref
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

__all__ = (
    "ADAPT",
    "ADMIT",
    "CANCEL",
    "LIBRARY",
    "LIMITS",
    "RELEASE",
    "SYNC",
    "Calls",
    "Library",
    "Script",
    "encode_head",
    "pack_common",
)


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(name).read_text("utf-8")


_PRELUDE = _read("prelude.lua")

#: What an ``EVALSHA`` script runs before the prelude: its KEYS and ARGV kept (the prelude's own
#: locals of those names hide them), and effects replication asked for (Redis < 7 needs it).
_EVAL_OPENING = """local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV
if redis.replicate_commands then pcall(redis.replicate_commands) end
"""

#: Errors after which a direct call is made again through ``execute_command``, with its retries.
_RETRY_THROUGH_CLIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def _get_connection_args() -> tuple[str, ...]:
    # ConnectionPool.get_connection takes nothing from redis-py 5.3 on (it warns about a command
    # name), and needs a command name before.
    name = inspect.signature(redis.asyncio.ConnectionPool.get_connection).parameters.get("command_name")
    return ("EVALSHA",) if name is not None and name.default is inspect.Parameter.empty else ()


_GET_CONNECTION_ARGS = _get_connection_args()


def _bulk(part: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(part), part)


class Script:
    """One script: its ``EVALSHA`` source and SHA1, its function's name, run against any client.

    Args:
        name: The script's file in ``lua/``.
        direct: Sent directly through a plain client's pool (the admission path; see the module).
    """

    __slots__ = ("_heads", "direct", "function", "name", "own", "sha", "source")

    def __init__(self, name: str, direct: bool = False) -> None:
        self.name = name
        #: The script's own file, after the prelude.
        self.own = _read(name)
        self.source = f"{_EVAL_OPENING}{_PRELUDE}\nbegin(EVAL_KEYS, EVAL_ARGV)\n{self.own}"
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()
        #: Its function's name in :data:`LIBRARY` (set by the library).
        self.function = ""
        self.direct = direct
        #: ``EVALSHA sha head...`` (index 0) and ``FCALL function head...`` (index 1) packed as RESP
        #: bulk strings, by head (few: one per gate and settings).
        self._heads: tuple[dict[tuple[bytes, ...], bytes], dict[tuple[bytes, ...], bytes]] = ({}, {})

    def pack(self, head: tuple[bytes, ...], args: Sequence[object], functions: bool = False) -> bytes:
        """``EVALSHA`` (``FCALL`` if ``functions``) of this script with ``head`` and ``args``, as RESP."""
        heads = self._heads[functions]
        packed = heads.get(head)
        if packed is None:
            if len(heads) >= 64:
                heads.clear()
            call = (b"FCALL", self.function.encode()) if functions else (b"EVALSHA", self.sha.encode())
            packed = heads[head] = b"".join(map(_bulk, (*call, *head)))
        parts = [b"*%d\r\n" % (len(head) + 2 + len(args)), packed]
        for arg in args:
            parts.append(_bulk(arg.encode() if isinstance(arg, str) else repr(arg).encode()))
        return b"".join(parts)

    async def __call__(
        self, client: Any, head: tuple[bytes, ...], args: Sequence[object], calls: Calls
    ) -> Any:
        """Run the script on ``client``, the way ``calls`` says its server takes, and return its reply.

        ``head`` is what every call of the gate sends first, encoded once (:func:`encode_head`):
        the number of keys, the keys and the common ARGV; ``args`` are the script's own.

        Raises:
            redis.exceptions.RedisError: Whatever the client raises (connection errors, timeouts).
        """
        pool = _plain_pool(client) if self.direct else None
        if pool is not None:
            try:
                return await _direct(pool, self.pack(head, args, calls.functions), calls.op_timeout)
            except NoScriptError:
                await client.script_load(self.source)
            except _RETRY_THROUGH_CLIENT:
                pass  # the client's own path, which retries and reconnects, has the last word
            except ResponseError as error:
                if not calls.functions:
                    raise
                await calls.missing(client, error)
        return await self.through(client, head, args, calls)

    async def through(
        self, client: Any, head: tuple[bytes, ...], args: Sequence[object], calls: Calls
    ) -> Any:
        """Run the script through ``client``'s ``execute_command``, loading what the server lacks."""
        if calls.functions:
            try:
                return await client.execute_command("FCALL", self.function, *head, *args)
            except ResponseError as error:
                await calls.missing(client, error)
            if calls.functions:  # the library is loaded now
                return await client.execute_command("FCALL", self.function, *head, *args)
        try:
            return await client.evalsha(self.sha, *head, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, *head, *args)


class Library:
    """The scripts as one Redis 7 function library, named by a digest of its source.

    Its source is the prelude, run once as the library loads, then one function per script, which
    calls ``begin()`` with its keys and arguments and runs the script's own file.

    Args:
        scripts: The scripts it holds; each is told its function's name.
    """

    __slots__ = ("name", "source")

    def __init__(self, *scripts: Script) -> None:
        # The source with a placeholder for the name, which is the digest of that whole source.
        parts = ["#!lua name=<name>\n", _PRELUDE]
        for script in scripts:
            function = f"<name>_{script.name.removesuffix('.lua')}"
            parts.append(
                f"\nredis.register_function('{function}', function(keys, args)\n"
                f"begin(keys, args)\n{script.own}\nend)\n"
            )
        source = "".join(parts)
        #: The library's name on the server: ``boundedgate_`` and 16 hex digits of its source's digest.
        self.name = "boundedgate_" + hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:16]
        self.source = source.replace("<name>", self.name)
        for script in scripts:
            script.function = f"{self.name}_{script.name.removesuffix('.lua')}"


class Calls:
    """How one gate's scripts reach its server: as functions of :data:`LIBRARY`, or by ``EVALSHA``.

    Functions for a ``redis.asyncio.Redis`` client (and its subclasses), until the server shows it
    has none or may not use them; ``EVALSHA`` for good for any other client (a cluster client).

    Args:
        client: The gate's client.
        op_timeout: The gate's ``op_timeout``: no call waits longer for its reply.
    """

    __slots__ = ("functions", "op_timeout")

    def __init__(self, client: Any, op_timeout: float = math.inf) -> None:
        #: True while the scripts are sent as functions (``FCALL``).
        self.functions = isinstance(client, redis.asyncio.Redis)
        #: The longest any call of the gate waits for its reply (its caller bounds it so).
        self.op_timeout = op_timeout

    async def missing(self, client: Any, error: ResponseError) -> None:
        """After ``FCALL`` failed with ``error``: load the library, or turn to ``EVALSHA``, or raise.

        The server lacks the library ("Function not found"): it is loaded (another process may
        load it at the same time: its "already exists" is as good). The server has no functions
        (before Redis 7: "unknown command"), or the client's ACL refuses them: every call from now
        on is sent by ``EVALSHA``. Any other error is the script's own, and raised.

        Raises:
            redis.exceptions.ResponseError: ``error``, or the library's load failing otherwise.
        """
        if isinstance(error, NoPermissionError) or "unknown command" in str(error).lower():
            self.functions = False
            return
        if not str(error).startswith("Function not found"):
            raise error
        try:
            await client.execute_command("FUNCTION", "LOAD", LIBRARY.source)
        except NoPermissionError:
            self.functions = False
        except ResponseError as failed:
            if "already exists" not in str(failed):
                raise


def _plain_pool(client: Any) -> redis.asyncio.ConnectionPool | None:
    """The pool of a plain ``redis.asyncio.Redis`` client, which a direct call may use; else None."""
    if type(client) is not redis.asyncio.Redis or client.connection is not None:
        return None
    pool = client.connection_pool
    return pool if type(pool) is redis.asyncio.ConnectionPool else None


#: What tells a connection's read_response to set no timeout (redis-py 8.1 on).
_NO_TIMEOUT = math.inf


def _takes_inf_as_no_timeout() -> bool:
    # Before redis-py 8.1, read_response(timeout=math.inf) sets a timer (one that never fires).
    version = re.match(r"(\d+)\.(\d+)", redis.__version__)
    return version is not None and (int(version[1]), int(version[2])) >= (8, 1)


_INF_IS_NO_TIMEOUT = _takes_inf_as_no_timeout()

#: redis-py's own way to send a command, which a direct call may do in fewer steps itself.
_SEND = redis.asyncio.Connection.send_packed_command


async def _direct(pool: redis.asyncio.ConnectionPool, command: bytes, op_timeout: float) -> Any:
    """Send ``command`` on a connection of ``pool`` and read its reply (raised if an error).

    The caller bounds the call by ``op_timeout`` (or less): a socket timeout that cannot end the
    read before that is not set (it is a timer a call). The connection is disconnected if the send
    or the read fails or is interrupted (by its own methods, or here), so it never goes back to the
    pool with a reply pending.
    """
    connection = _take(pool)
    taken = connection is not None
    if connection is None:
        connection = await pool.get_connection(*_GET_CONNECTION_ARGS)  # type: ignore[no-untyped-call]
    try:
        if taken and (not connection.is_connected or await getattr(connection, _CAN_READ)()):
            await pool.ensure_connection(connection)  # connects it, or a new one for one left unread
        writer = connection._writer
        if (
            writer is None
            or connection.health_check_interval
            or type(connection).send_packed_command is not _SEND
        ):
            await connection.send_packed_command(command)
        else:
            # What send_packed_command does, less its socket timeout: that costs a task a command
            # (its wait_for), and the caller's op_timeout bounds the call already. Taken only
            # where send_packed_command is redis-py's own (a subclass's hook is kept) and no
            # health check is asked for.
            try:
                writer.write(command)
                await writer.drain()
            except BaseException:
                await connection.disconnect(nowait=True)
                raise
        socket_timeout = connection.socket_timeout
        if socket_timeout and socket_timeout >= op_timeout:
            if _INF_IS_NO_TIMEOUT:
                return await connection.read_response(timeout=_NO_TIMEOUT)
            connection.socket_timeout = None  # for this read only: the connection is ours meanwhile
            try:
                return await connection.read_response()
            finally:
                connection.socket_timeout = socket_timeout
        return await connection.read_response()
    finally:
        if taken:
            await _put_back(pool, connection)
        else:
            await pool.release(connection)


#: Whether this redis-py's pool can be taken from as :func:`_take` does, and how a connection
#: tells it has data unread (``can_read``; ``can_read_destructive`` in older redis-py).
_TAKES = hasattr(redis.asyncio.ConnectionPool, "ensure_connection")
_CAN_READ = "can_read" if hasattr(redis.asyncio.Connection, "can_read") else "can_read_destructive"


#: What a pool keeps its connections in use in (a set; a weak set after its ``reset()``).
_SETS = (set, weakref.WeakSet)


def _take(pool: Any) -> Any:
    """An idle connection of ``pool``, taken as its ``get_connection`` would, in fewer steps; or None.

    None (``get_connection`` then) when the pool has none idle, is inside its own lock, lacks the
    lists this takes from (another redis-py), or has a credential provider (its connections may be
    re-authenticated as they go back, by the pool's release). The pool's connection events and
    metrics do not see a connection taken so; :func:`_put_back` returns it the same way.
    """
    available = getattr(pool, "_available_connections", None)
    if (
        not (available and _TAKES)
        or type(available) is not list
        or type(pool._in_use_connections) not in _SETS
    ):
        return None
    lock = getattr(pool, "_lock", None)
    if (lock is not None and lock.locked()) or pool.connection_kwargs.get("credential_provider") is not None:
        return None
    connection = available.pop()
    pool._in_use_connections.add(connection)
    return connection


async def _put_back(pool: Any, connection: Any) -> None:
    """Give back a connection :func:`_take` took, as the pool's ``release`` would, less events and metrics."""
    in_use = pool._in_use_connections
    if connection not in in_use:  # the pool was reset meanwhile: the connection is none of its own
        await connection.disconnect()
        return
    in_use.remove(connection)
    if getattr(connection, "_should_reconnect", False):  # redis-py 8: a maintenance moved the server
        await connection.disconnect()
    pool._available_connections.append(connection)


def encode_head(keys: Sequence[str], common: Sequence[object]) -> tuple[bytes, ...]:
    """The number of keys, the keys and the common ARGV of a gate's calls, encoded as Redis gets them.

    Encoded once per gate (and again when its settings change), not by the client on every call.
    The common settings go as one argument (:func:`pack_common`), which the prelude takes apart.
    """
    return tuple(str(part).encode() for part in (len(keys), *keys, pack_common(common)))


def pack_common(common: Sequence[object]) -> str:
    """The settings common to a gate's calls as the scripts' ``ARGV[1]``: ``C|Q|lease|...|wake prefix``."""
    return "|".join(str(part) for part in common)


ADMIT = Script("admit.lua", direct=True)
SYNC = Script("sync.lua")
RELEASE = Script("release.lua", direct=True)
CANCEL = Script("cancel.lua", direct=True)
LIMITS = Script("limits.lua")
ADAPT = Script("adapt.lua")
#: Every script, as the one library a server with functions is sent.
LIBRARY = Library(ADMIT, SYNC, RELEASE, CANCEL, LIMITS, ADAPT)
