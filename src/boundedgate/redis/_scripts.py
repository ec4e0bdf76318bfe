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

__all__ = ("ADAPT", "ADMIT", "CANCEL", "LIMITS", "RELEASE", "SYNC", "Script", "encode_head", "pack_common")


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

    async def __call__(self, client: Any, head: Sequence[bytes], args: Sequence[object]) -> Any:
        """Run the script on ``client`` and return its reply.

        ``head`` is what every call of the gate sends first, encoded once (:func:`encode_head`):
        the number of keys, the keys and the common ARGV; ``args`` are the script's own.

        Raises:
            redis.exceptions.RedisError: Whatever the client raises (connection errors, timeouts).
        """
        try:
            return await client.evalsha(self.sha, *head, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, *head, *args)


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
