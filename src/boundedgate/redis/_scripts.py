"""The Lua scripts, loaded from the package's ``lua/`` folder and run by their SHA1.

Each script is ``prelude.lua`` followed by its own file. They are sent with ``EVALSHA``; a server
that does not know one (it restarted, or is another server) is sent ``SCRIPT LOAD`` once and asked
again.

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
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.exceptions import NoScriptError

__all__ = ("ADAPT", "ADMIT", "CANCEL", "LIMITS", "RELEASE", "SYNC", "Script", "encode_head", "pack_common")


def _source(name: str) -> str:
    lua = resources.files(__package__).joinpath("lua")
    return lua.joinpath("prelude.lua").read_text("utf-8") + "\n" + lua.joinpath(name).read_text("utf-8")


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
    """One script: its source and SHA1, run against whichever client is given.

    Args:
        name: The script's file in ``lua/``.
        direct: Sent directly through a plain client's pool (the admission path; see the module).
    """

    __slots__ = ("_heads", "direct", "name", "sha", "source")

    def __init__(self, name: str, direct: bool = False) -> None:
        self.name = name
        self.source = _source(name)
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()
        self.direct = direct
        #: ``EVALSHA sha head...`` packed as RESP bulk strings, by head (few: one per gate and settings).
        self._heads: dict[tuple[bytes, ...], bytes] = {}

    def pack(self, head: tuple[bytes, ...], args: Sequence[object]) -> bytes:
        """``EVALSHA`` of this script with ``head`` and ``args``, as the RESP command Redis reads."""
        packed = self._heads.get(head)
        if packed is None:
            if len(self._heads) >= 64:
                self._heads.clear()
            packed = self._heads[head] = b"".join(map(_bulk, (b"EVALSHA", self.sha.encode(), *head)))
        parts = [b"*%d\r\n" % (len(head) + 2 + len(args)), packed]
        for arg in args:
            parts.append(_bulk(arg.encode() if isinstance(arg, str) else repr(arg).encode()))
        return b"".join(parts)

    async def __call__(self, client: Any, head: tuple[bytes, ...], args: Sequence[object]) -> Any:
        """Run the script on ``client`` and return its reply.

        ``head`` is what every call of the gate sends first, encoded once (:func:`encode_head`):
        the number of keys, the keys and the common ARGV; ``args`` are the script's own.

        Raises:
            redis.exceptions.RedisError: Whatever the client raises (connection errors, timeouts).
        """
        pool = _plain_pool(client) if self.direct else None
        if pool is not None:
            try:
                return await _direct(pool, self.pack(head, args))
            except NoScriptError:
                await client.script_load(self.source)
            except _RETRY_THROUGH_CLIENT:
                pass  # the client's own path, which retries and reconnects, has the last word
            return await client.evalsha(self.sha, *head, *args)
        try:
            return await client.evalsha(self.sha, *head, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, *head, *args)


def _plain_pool(client: Any) -> redis.asyncio.ConnectionPool | None:
    """The pool of a plain ``redis.asyncio.Redis`` client, which a direct call may use; else None."""
    if type(client) is not redis.asyncio.Redis or client.connection is not None:
        return None
    pool = client.connection_pool
    return pool if type(pool) is redis.asyncio.ConnectionPool else None


async def _direct(pool: redis.asyncio.ConnectionPool, command: bytes) -> Any:
    """Send ``command`` on a connection of ``pool`` and read its reply (raised if an error).

    The connection's own methods disconnect it if a send or read fails or is interrupted, so it
    never goes back to the pool with a reply pending.
    """
    connection = await pool.get_connection(*_GET_CONNECTION_ARGS)  # type: ignore[no-untyped-call]
    try:
        await connection.send_packed_command(command)
        return await connection.read_response()
    finally:
        await pool.release(connection)


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
