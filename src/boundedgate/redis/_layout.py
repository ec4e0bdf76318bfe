"""Where a cluster gate lives in Redis: its keys, its wake channels, and the ids of its requests.

Every key of a gate shares one hash tag, ``{name}``, so that a Redis Cluster keeps them in one slot
and every script can declare all of them. The Lua prelude (``lua/prelude.lua``) documents what each
key holds.
"""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ("KEY_NAMES", "agent_id", "gate_keys", "wake_prefix")

#: The gate's keys, in the order the scripts receive them as ``KEYS[1..9]``.
KEY_NAMES = ("meta", "holders", "waiters", "wdue", "info", "outcomes", "seq", "stats", "costs")


def gate_keys(name: str) -> tuple[str, ...]:
    """The gate's keys, ``boundedgate:{name}:<what>``, in ``KEYS`` order."""
    prefix = f"boundedgate:{{{name}}}:"
    return tuple(prefix + what for what in KEY_NAMES)


def wake_prefix(name: str) -> str:
    """The prefix of the gate's wake channels; a process's agent id completes it."""
    return f"boundedgate:{{{name}}}:wake:"


def agent_id() -> str:
    """A new id for one gate object in one process: ``host/pid/random``, readable when inspecting."""
    host = socket.gethostname().replace("|", "_").replace(" ", "_") or "host"
    return f"{host}/{os.getpid()}/{secrets.token_hex(4)}"
