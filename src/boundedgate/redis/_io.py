"""Talking to Redis: which errors mean "unreachable", calls bounded in time, and replies decoded."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions

__all__ = ("UNREACHABLE", "bounded", "fields", "own_client", "pool_full", "pooled", "text")

_CANCELLING = getattr(asyncio.Task, "cancelling", None)  # Python 3.11+

T = TypeVar("T")

#: Errors that mean Redis could not be reached or did not answer in time: the gate fails closed.
#: A read-only replica (after a failover, before clients find the new primary) counts as unreachable.
UNREACHABLE: tuple[type[BaseException], ...] = (
    # includes BusyLoadingError (a restarted server loading data) and ClientConnectionFailed (below)
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    OSError,
    TimeoutError,
    asyncio.TimeoutError,
)


async def bounded(call: Coroutine[Any, Any, T], seconds: float) -> T:
    """Await ``call`` for at most ``seconds``, and make sure a cancellation of the caller is raised.

    Some redis-py versions swallow the cancellation of a command in flight and return its reply;
    this raises ``CancelledError`` then, so a cancelled caller never carries on as if it had not
    been (the reply is dropped: every script is idempotent, and the caller's cleanup undoes it).

    Every call the gate makes to Redis is awaited here, so this is where an error that redis-py's
    connection layer lets out raw (not a ``RedisError``: redis/redis-py#4287) becomes
    :class:`ClientConnectionFailed`, which the gate counts as unreachable; an error raised by the
    gate's own code is raised as it is (:func:`_raised_in_the_client` tells them apart).

    Raises:
        TimeoutError: ``seconds`` passed first.
        ClientConnectionFailed: redis-py's connection layer failed with an error not its own.
        asyncio.CancelledError: The caller was cancelled, even if the client swallowed it.
    """
    task = asyncio.current_task()
    if _CANCELLING is None or task is None:
        return await _in_own_task(call, seconds)
    before = _CANCELLING(task)
    try:
        async with asyncio.timeout(seconds):
            result = await call
    except TimeoutError:
        raise TimeoutError(f"no answer from Redis within {seconds:.3f}s") from None
    except Exception as error:
        if _raised_in_the_client(error):
            raise _unreachable(error) from error
        raise
    if _CANCELLING(task) > before:
        raise asyncio.CancelledError
    return result


#: What redis-py's pool adds to its connections' settings itself, tied to that pool: a new pool
#: makes its own.
_POOLS_OWN = frozenset(
    (
        "himport_registry",
        "maint_notifications_pool_handler",
        "oss_cluster_maint_notifications_handler",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
    )
)


async def pooled(call: Callable[[], Coroutine[Any, Any, T]], seconds: float) -> T:
    """``bounded(call(), ...)``, called again while the client's pool has no free connection.

    A pool at its ``max_connections`` raises before anything is sent (``MaxConnectionsError`` in
    redis-py 7.4 and 8, a plain ``ConnectionError("Too many connections")`` in 6.4 and before):
    that is this process's own traffic, not an unreachable Redis. Wait for a connection to come
    back, polling with a jittered back-off, rather than fail closed at once.
    The attempts and the pauses between them take ``seconds`` in all.

    Raises:
        TimeoutError: No answer within ``seconds``, or no free connection in the pool by then.
        asyncio.CancelledError: As for :func:`bounded`.
    """
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    delay = 0.001
    while True:
        try:
            return await bounded(call(), max(0.0, give_up - loop.time()))
        except redis.exceptions.ConnectionError as error:
            if not pool_full(error):
                raise
            left = give_up - loop.time()
            if left <= 0:
                raise TimeoutError(f"the client's pool had no free connection for {seconds:.3f}s") from error
            await asyncio.sleep(min(left, delay * (0.5 + random.random())))
            delay = min(2 * delay, 0.05)


def pool_full(error: redis.exceptions.ConnectionError) -> bool:
    """Whether ``error`` is a pool's refusal of one more connection, not a failure to reach Redis."""
    if isinstance(error, redis.exceptions.MaxConnectionsError):
        return True
    return type(error) is redis.exceptions.ConnectionError and error.args == ("Too many connections",)


def own_client(client: Any) -> tuple[Any, Callable[[], Coroutine[Any, Any, None]]] | None:
    """A client of the gate's own, on a new pool with the settings of ``client``'s, and its closer.

    The process's other traffic cannot take its connections, so the gate's lease renewals and
    wake-up subscription never wait behind (or are refused by) a pool that traffic exhausted.
    None when ``client`` has no connection pool to copy (a cluster client, say), or one whose
    settings a new pool refuses: the gate then does that work through ``client``.
    """
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, redis.asyncio.ConnectionPool):
        return None
    settings = {k: v for k, v in pool.connection_kwargs.items() if k not in _POOLS_OWN}
    try:
        own_pool = redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **settings)
        own = redis.asyncio.Redis(connection_pool=own_pool)
    except (TypeError, ValueError, redis.exceptions.RedisError):  # a pool this cannot copy
        return None

    async def close() -> None:
        await own.aclose()
        await own_pool.disconnect()

    return own, close


async def _in_own_task(call: Coroutine[Any, Any, T], seconds: float) -> T:
    # Python 3.10 cannot tell a swallowed cancellation: the call runs in a task of its own, so the
    # caller's cancellation is delivered at this await whatever the client does with it.
    task = asyncio.ensure_future(call)
    try:
        # Not wait_for: on Python 3.10 and 3.11 it returns a result that is ready when the
        # cancellation arrives, and the cancellation is lost.
        done, _ = await asyncio.wait((task,), timeout=seconds)
    except BaseException:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise TimeoutError(f"no answer from Redis within {seconds:.3f}s")
    try:
        return task.result()
    except Exception as error:
        if _raised_in_the_client(error):
            raise _unreachable(error) from error
        raise


class ClientConnectionFailed(redis.exceptions.ConnectionError):
    """redis-py's connection layer failed with an error that is not redis-py's own (not a ``RedisError``).

    Some redis-py versions let a transport's internal error out of a connection the server or a
    failover tore down (``AttributeError: 'NoneType' object has no attribute 'writelines'``,
    ``TypeError: 'NoneType' object is not callable``: redis/redis-py#4287) instead of a
    ``ConnectionError``. Redis did not answer that call, so the gate counts it unreachable; the
    original error is this one's ``__cause__``.
    """


def _unreachable(error: Exception) -> ClientConnectionFailed:
    if isinstance(error, redis.exceptions.RedisClusterException):  # not a RedisError: a slot not covered...
        return ClientConnectionFailed(
            f"the cluster client failed with {type(error).__name__}: {error}; Redis did not answer, "
            "so it counts as unreachable"
        )
    return ClientConnectionFailed(
        f"the client's connection failed with {type(error).__name__}: {error} (a redis-py defect, "
        "redis/redis-py#4287: upgrading redis-py may fix it); Redis did not answer, "
        "so it counts as unreachable"
    )


def _raised_in_the_client(error: Exception) -> bool:
    """Whether redis-py's connection layer raised ``error``, which is not one of redis-py's errors.

    Told apart by where it was raised: below the last frame of this package, in redis-py (or in
    what redis-py called: the event loop's transport). An error raised in the gate's own code
    (no frame of redis-py's below its last one) is a defect of ours, and is raised as it is.
    """
    if isinstance(error, (redis.exceptions.RedisError, OSError)):
        return False
    in_client = False
    frame = error.__traceback__
    while frame is not None:
        module = frame.tb_frame.f_globals.get("__name__", "")
        if module.startswith("boundedgate."):
            in_client = False
        elif module == "redis" or module.startswith("redis."):
            in_client = True
        frame = frame.tb_next
    return in_client


def _abandon(task: asyncio.Future[Any]) -> None:
    task.cancel()
    task.add_done_callback(_drop)


def _drop(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so that asyncio does not log it as never retrieved


def fields(reply: object) -> list[Any]:
    """The fields of a script's one-string reply (``a|b|c``), as bytes or str as the client decodes."""
    if isinstance(reply, bytes):
        return reply.split(b"|")
    return str(reply).split("|")


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
