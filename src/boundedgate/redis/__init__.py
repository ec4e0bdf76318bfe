"""One limit for the whole cluster: :class:`RedisGate`, the API of ``BoundedGate`` enforced in Redis.

:class:`RedisKeyedGate` is ``KeyedGate``'s: a cluster gate per key (tenant, session).

An optional part of boundedgate: ``pip install 'boundedgate[redis]'`` brings the client it needs
(redis-py's asyncio client). ``python -m boundedgate.redis inspect NAME`` prints a gate's live state.
"""

try:
    import redis.asyncio as _client  # noqa: F401  (bound privately: not part of this namespace)
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError("boundedgate.redis needs the redis client: pip install 'boundedgate[redis]'") from error

from ._gate import RedisGate, RedisPermit
from ._inspect import format_cluster, read_cluster
from ._keyed import RedisKeyedGate
from ._stats import ClusterHolder, ClusterStatistics, ClusterWaiter, RedisGateStatistics

__all__ = (
    "ClusterHolder",
    "ClusterStatistics",
    "ClusterWaiter",
    "RedisGate",
    "RedisGateStatistics",
    "RedisKeyedGate",
    "RedisPermit",
    "format_cluster",
    "read_cluster",
)

for _name in __all__:
    globals()[_name].__module__ = "boundedgate.redis"
del _name
