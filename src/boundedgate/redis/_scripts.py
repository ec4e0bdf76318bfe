"""The Lua scripts, loaded from the package's ``lua/`` folder and run by their SHA1.

Each script is ``prelude.lua`` followed by its own file. They are sent with ``EVALSHA``; a server
that does not know one (it restarted, or is another server) is sent ``SCRIPT LOAD`` once and asked
again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ("ADAPT", "ADMIT", "CANCEL", "LIMITS", "RELEASE", "SYNC", "Script")


def _source(name: str) -> str:
    lua = resources.files(__package__).joinpath("lua")
    return lua.joinpath("prelude.lua").read_text("utf-8") + "\n" + lua.joinpath(name).read_text("utf-8")


class Script:
    """One script: its source and SHA1, run against whichever client is given.

    Args:
        name: The script's file in ``lua/``.
    """

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = _source(name)
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, client: Any, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Run the script on ``client`` and return its reply.

        Raises:
            redis.exceptions.RedisError: Whatever the client raises (connection errors, timeouts).
        """
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


ADMIT = Script("admit.lua")
SYNC = Script("sync.lua")
RELEASE = Script("release.lua")
CANCEL = Script("cancel.lua")
LIMITS = Script("limits.lua")
ADAPT = Script("adapt.lua")
