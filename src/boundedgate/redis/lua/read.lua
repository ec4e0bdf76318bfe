-- read: a gate's state as it is, for inspection (read_cluster, cluster_stats, `inspect`); it writes
-- nothing, so a replica runs it too. Not part of the gate's library, and without the prelude: sent
-- with EVAL. One script rather than a MULTI of reads, so that a cluster client routes it by its keys
-- to the primary of the gate's slot (the server's TIME, which has no key, is read inside it).
-- KEYS: the gate's keys, in prelude order. Returns {TIME, meta, holders with leases, waiters,
-- wdue with times, info, stats, {PTTL of each key}}: hashes and scored sets as flat arrays.
local ttls = {}
for i = 1, #KEYS do
  ttls[i] = redis.call('PTTL', KEYS[i])
end
return {
  redis.call('TIME'),
  redis.call('HGETALL', KEYS[1]),
  redis.call('ZRANGE', KEYS[2], '0', '-1', 'WITHSCORES'),
  redis.call('ZRANGE', KEYS[3], '0', '-1'),
  redis.call('ZRANGE', KEYS[4], '0', '-1', 'WITHSCORES'),
  redis.call('HGETALL', KEYS[5]),
  redis.call('HGETALL', KEYS[8]),
  ttls,
}
