"""A real uvicorn server for the tests, in a thread of its own, on a free loopback port.

The server's event loop runs everything of the service: the ASGI app, its gate, and the fake
provider the app streams from (tests/fake_provider.py), so that what a test reads of them on that
loop (:meth:`Served.call`) is a consistent snapshot between two of its callbacks. The clients run
on the test's own loop, in real time. The server is bounded: it stops itself after ``limit``
seconds whatever happens, and on leaving the context.

Without uvicorn (or, for the browser test, Debian's chromium) a test skips on a developer's
machine and fails under CI=true, as the Redis tests do: a green CI never hides a missing install.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

import pytest

from tests.distributed.servers import in_ci

__all__ = ("CHROMIUM", "Served", "chromium_binary", "require", "served")

_T = TypeVar("_T")

#: Where Debian's chromium package puts the browser (``make chromium`` installs it).
CHROMIUM = "/usr/bin/chromium"


def require(module: str, why: str) -> ModuleType:
    """Import ``module``, or skip the test (fail it under CI=true) saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed: {why}"
        if in_ci():
            pytest.fail(f"{message}; CI=true, so these tests must run, not skip", pytrace=False)
        pytest.skip(message)


def chromium_binary() -> str:
    """Debian's chromium, or skip (fail under CI=true) saying how to install it."""
    found = shutil.which("chromium") or (CHROMIUM if shutil.which(CHROMIUM) else None)
    if found is None:
        message = "no chromium: install Debian's chromium (make chromium)"
        if in_ci():
            pytest.fail(f"{message}; CI=true, so the browser test must run, not skip", pytrace=False)
        pytest.skip(message)
    return found


class Served:
    """A running server: its URL, its loop, and what the service's builder returned."""

    def __init__(self, url: str, loop: asyncio.AbstractEventLoop, parts: Any) -> None:
        self.url = url
        self.loop = loop
        self.parts = parts

    async def call(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` on the server's loop, between two of its callbacks, and return its result."""
        done: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        client_loop = asyncio.get_running_loop()

        def run() -> None:
            try:
                result = function()
            except BaseException as exc:
                client_loop.call_soon_threadsafe(done.set_exception, exc)
            else:
                client_loop.call_soon_threadsafe(done.set_result, result)

        self.loop.call_soon_threadsafe(run)
        return await asyncio.wait_for(done, 10)

    async def until(self, condition: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Wait (real time, at most ``timeout`` s) until ``condition`` holds on the server's loop."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not await self.call(condition):
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"not within {timeout} s: {what}")
            await asyncio.sleep(0.005)


@contextlib.contextmanager
def served(
    build: Callable[[], contextlib.AbstractAsyncContextManager[tuple[Any, Any]]],
    *,
    limit: float = 60.0,
) -> Iterator[Served]:
    """Serve the ASGI app that ``build`` makes, with uvicorn, in a thread; stop it on exit.

    ``build()`` is entered on the server's loop: an async context manager giving ``(app, parts)``;
    ``parts`` is what the test reads back (``Served.parts``).
    """
    uvicorn = require("uvicorn", "pip install 'boundedgate[test]'")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before uvicorn accepts wait in the backlog
    port = sock.getsockname()[1]
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with build() as (app, parts):
            config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
            server = uvicorn.Server(config)
            loop = asyncio.get_running_loop()
            box.update(server=server, served=Served(f"http://127.0.0.1:{port}", loop, parts))
            watchdog = loop.call_later(limit, setattr, server, "should_exit", True)
            loop.call_soon(ready.set)
            try:
                await server.serve(sockets=[sock])
            finally:
                watchdog.cancel()

    def thread_main() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name="uvicorn", daemon=True)
    thread.start()
    try:
        ready.wait(30)
        if "served" not in box:
            raise RuntimeError("the server did not start") from box.get("error")
        yield box["served"]
    finally:
        server = box.get("server")
        if server is not None:
            server.should_exit = True
        thread.join(15)
        sock.close()
        if thread.is_alive():
            pytest.fail("the server did not stop within 15 s")
        if "error" in box:
            raise box["error"]
