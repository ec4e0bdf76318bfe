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

Every call goes through the client's own ``execute_command`` (``FCALL``, or ``EVALSHA`` by
``client.evalsha``): its connection pool, retries, reconnection, hooks and metrics apply to the
gate's calls as to any other command, whatever redis-py version the user has. The head of the
call (the key count, the keys and the common settings) is encoded once per gate.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from ._io import pool_full

__all__ = (
    "ADAPT",
    "ADMIT",
    "CANCEL",
    "LIBRARY",
    "LIMITS",
    "RATE",
    "RELEASE",
    "SYNC",
    "Calls",
    "Library",
    "Script",
    "Unreplicated",
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


class Script:
    """One script: its ``EVALSHA`` source and SHA1, its function's name, run against any client.

    Args:
        name: The script's file in ``lua/``.
    """

    __slots__ = ("function", "name", "own", "sha", "source")

    def __init__(self, name: str) -> None:
        self.name = name
        #: The script's own file, after the prelude.
        self.own = _read(name)
        self.source = f"{_EVAL_OPENING}{_PRELUDE}\nbegin(EVAL_KEYS, EVAL_ARGV)\n{self.own}"
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()
        #: Its function's name in :data:`LIBRARY` (set by the library).
        self.function = ""

    async def __call__(
        self,
        client: Any,
        head: tuple[bytes, ...],
        args: Sequence[object],
        calls: Calls,
        wait: tuple[int, int] | None = None,
    ) -> Any:
        """Run the script on ``client``, the way ``calls`` says its server takes, and return its reply.

        ``head`` is what every call of the gate sends first, encoded once (:func:`encode_head`):
        the number of keys, the keys and the common ARGV; ``args`` are the script's own. What the
        server lacks (the library, or the script) is loaded, and the call made again.

        With ``wait``, ``(replicas, milliseconds)``, the call is followed by ``WAIT replicas
        milliseconds`` on the same connection, in the same round trip (a pipeline): the reply
        comes once that many replicas have the script's writes, or the time is up.

        A call that finds its connection closed by the server (a restart, a killed client, an idle
        timeout) is made once more: the pool dropped that connection, and the call connects anew
        (redis-py 5's clients do not retry it unless asked to; later versions do by default).

        Raises:
            Unreplicated: Fewer than ``replicas`` acknowledged the writes in time (it carries the reply).
            redis.exceptions.RedisError: Whatever the client raises (connection errors, timeouts).
        """
        run = self._run if wait is None else functools.partial(self._run_and_wait, wait=wait)
        try:
            return await run(client, head, args, calls)
        except redis.exceptions.ConnectionError as error:
            if pool_full(error):
                raise
        return await run(client, head, args, calls)

    async def _run_and_wait(
        self,
        client: Any,
        head: tuple[bytes, ...],
        args: Sequence[object],
        calls: Calls,
        wait: tuple[int, int],
    ) -> Any:
        for _ in range(3):  # at most: the library loaded, then the script loaded
            functions = calls.functions
            call = ("FCALL", self.function) if functions else ("EVALSHA", self.sha)
            async with client.pipeline(transaction=False) as pipe:
                pipe.execute_command(*call, *head, *args)
                pipe.execute_command("WAIT", *wait)
                reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(acked, Exception):
                raise acked
            if not isinstance(reply, ResponseError):
                if int(acked) < wait[0]:
                    raise Unreplicated(reply, int(acked), wait)
                return reply
            if functions:
                await calls.missing(client, reply)
            elif isinstance(reply, NoScriptError):
                await client.script_load(self.source)
            else:
                raise reply
        raise reply

    async def _run(self, client: Any, head: tuple[bytes, ...], args: Sequence[object], calls: Calls) -> Any:
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


class Unreplicated(redis.exceptions.RedisError):
    """A script's writes reached fewer replicas than the gate's ``wait_replicas`` within ``wait_timeout``.

    The script ran on the primary, and its reply is here: what the gate does with it depends on the
    call (an admission granted this way is given back and refused; see ``RedisGate``).
    """

    def __init__(self, reply: Any, acked: int, wait: tuple[int, int]) -> None:
        super().__init__(
            f"{acked} of {wait[0]} replicas acknowledged the gate's writes within {wait[1]} ms "
            "(WAIT, the gate's wait_replicas): a failover now could lose them"
        )
        #: The script's reply.
        self.reply = reply
        #: The replicas that acknowledged.
        self.acked = acked


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
    """

    __slots__ = ("functions",)

    def __init__(self, client: Any) -> None:
        #: True while the scripts are sent as functions (``FCALL``).
        self.functions = isinstance(client, redis.asyncio.Redis)

    async def missing(self, client: Any, error: ResponseError) -> None:
        """After ``FCALL`` failed with ``error``: load the library, or turn to ``EVALSHA``, or raise.

        The server lacks the library ("Function not found"): it is loaded (another process may
        load it at the same time: its "already exists" is as good). The server has no functions
        (before Redis 7: "unknown command"), or the client's ACL refuses them: every call from now
        on is sent by ``EVALSHA``, and so is this one, whichever of the calls in flight at the
        first reply turned the gate. Any other error is the script's own, and raised.

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


def encode_head(keys: Sequence[str], common: Sequence[object]) -> tuple[bytes, ...]:
    """The number of keys, the keys and the common ARGV of a gate's calls, encoded as Redis gets them.

    Encoded once per gate (and again when its settings change), not by the client on every call.
    The common settings go as one argument (:func:`pack_common`), which the prelude takes apart.
    """
    return tuple(str(part).encode() for part in (len(keys), *keys, pack_common(common)))


def pack_common(common: Sequence[object]) -> str:
    """The settings common to a gate's calls as the scripts' ``ARGV[1]``: ``C|Q|lease|...|wake prefix``."""
    return "|".join(str(part) for part in common)


ADMIT = Script("admit.lua")
SYNC = Script("sync.lua")
RELEASE = Script("release.lua")
CANCEL = Script("cancel.lua")
LIMITS = Script("limits.lua")
ADAPT = Script("adapt.lua")
RATE = Script("rate.lua")
#: Every script, as the one library a server with functions is sent.
LIBRARY = Library(ADMIT, SYNC, RELEASE, CANCEL, LIMITS, ADAPT, RATE)
