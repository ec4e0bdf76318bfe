-- boundedgate: the prelude of every RedisGate script (each script is this file followed by its own;
-- see begin() below for how it is run).
--
-- Rule 1: every decision about a cluster gate is taken here, in one atomic script per event, never
-- by a client reading state and writing it back.
-- Rule 2: time is the Redis server's clock (TIME, in ms). Clients' clocks decide nothing here; their
-- deadlines arrive as a remaining budget and are stored on the server's clock, only to free places.
--
-- Keys (one hash tag, so one slot in a cluster; every key is declared in KEYS):
--   1 meta     hash   epoch (TIME when the state was created, or when it was found on a server of
--                     another replication history: fence()), replid (that history's id), C and Q
--                     last used, and Cset / Qset:
--                     limits set at runtime (RedisGate.set_limits, or the cluster's adaptive
--                     controller: adapt.lua), which outrank every process's own; pause: no start
--                     before this time (ms), a provider's rate-limit reset; cut, grew, Cvalue: the
--                     adaptive controller's last cut and growth (ms) and its C as a real number;
--                     wpeak: the peak running since the controller last changed C (caps growth;
--                     never above stats' peak_running, so a grant below it leaves the peak alone);
--                     pace: a feasible gate's mean run (ms; see "Deadline-feasible admission")
--   2 holders  zset   id -> lease expiry (ms)
--   3 waiters  zset   id -> arrival sequence (FIFO by arrival at Redis)
--   4 wdue     zset   id -> min(deadline, waiter-lease expiry) (ms): the sweep index of waiters
--   5 info     hash   id -> "agent|deadline_ms|since_ms|token" for every holder and waiter
--                     (deadline -1: none; token '' while waiting)
--   6 outcomes zset   id -> when it ended (ms) * 16 + how (ENDINGS): one key for how and when, so an
--                     outcome is recorded with one call and forgotten OUTCOME_TTL later by rank (a
--                     new name: the layout before it kept an outcome hash and an ended zset of plain
--                     times; during an upgrade, an outcome one layout records is unknown to the
--                     other, as if forgotten, never misread)
--   7 seq      string INCR counter: arrival order and fencing tokens
--   8 stats    hash   cluster counters and peaks
--   9 costs    hash   id -> declared cost, for the waiters and holders of a gate with rate limits
--                     (absent: 0); meta then also holds b1, b2, ...: each bucket's empty time (ms,
--                     server clock; absent: full), and qcost: the costs queued (see "Rate limits")
-- Keys get PEXPIRE IDLE_TTL as a script ends (reply: see WRITTEN); a gate that goes idle leaves
-- only meta, seq, stats and its recent outcomes, for IDLE_TTL (holders, waiters, wdue and info are
-- empty, and Redis deletes empty collections). A holder or waiter renewed by sync refreshes its
-- key and info with it.
--
-- ARGV 1, the settings common to every call of a process's gate, in one argument (one to encode
-- and send, not eight): "C|Q|lease ms|waiter lease ms|outcome ttl ms|idle ttl ms|buckets|wake
-- prefix" (Q -1: unbounded; buckets: the rate limits, '' for none, see "Rate limits"; the agent's
-- id completes the wake channel's prefix). A script's own ARGV follow.

-- The prelude defines its helpers and the per-call state they share; begin() fills that state in
-- for one call. Sent with EVALSHA (Redis < 7, and cluster clients), the prelude runs on every call
-- followed by begin(KEYS, ARGV) and the script's own file; loaded as a Redis 7 function library
-- (_scripts.LIBRARY), it runs once per server, and each script is a function that calls begin()
-- with its keys and arguments, then runs its file: the helpers are made once, not per call.

local KEYS, ARGV -- of the call
local META, HOLDERS, WAITERS, WDUE, INFO, OUTCOMES, SEQ, STATS, COSTS
local C, Q, LEASE, WAITER_TTL, OUTCOME_TTL, IDLE_TTL, WAKE
local IDLE_TTL_ARG -- as given: a number is formatted anew for every call it is passed to
local PAUSE -- no request starts before this time (ms, server clock): a rate-limit reset
local META_NOW, EPOCH
local FENCED -- true once this call has checked the server's replication id (fence())
local WPEAK -- meta's wpeak as a number, read at the first grant (nil before)
local clock, now
local SECONDS, SECONDS_MS -- TIME's seconds as last taken apart, and in ms
local SWEEP = 100 -- at most this many leases, waiters and outcomes swept per script: no long script
local SWEEP_ARG = '100' -- SWEEP as an argument of a call (strings pass as they are; numbers are formatted)

-- The holders and waiters there are, from tick() on (nil before it): every step after it that
-- adds or removes one keeps them exact, so no script counts the collections twice.
local RUNNING, WAITING

-- The keys whose idle TTL this script sets as it ends: the collections it may have made anew (an
-- emptied collection is deleted, and its next member makes it again, without a TTL), and meta,
-- seq and stats when it created them. A collection that already had members has its TTL. Every
-- key's TTL is refreshed every IDLE_TTL / 10 besides (meta's 'touched'), so a key that is only
-- read or emptied keeps one.
local WRITTEN
local SWEEP_OUTCOMES -- false in admit: the scripts that record outcomes forget old ones

-- The calling process's agent id, in scripts whose reply can tell it of its own waiters' grants
-- (admit, release, cancel): those are listed in HANDED for the reply, not published.
local SELF, HANDED

-- ARGV[1] last taken apart, and what it said: a library's calls from one gate repeat it.
local COMMON, C0, Q0, LEASE0, WAITER_TTL0, OUTCOME_TTL0, IDLE_TTL0, WAKE0

-- The rate limits (see "Rate limits" below): BUCKETS, parsed from ARGV[1]; EMPTY, their state
-- for this call (nil until read).
local BUCKETS, EMPTY = {}, nil
local parse_buckets

local function begin(keys, argv)
  KEYS, ARGV = keys, argv
  META, HOLDERS, WAITERS, WDUE, INFO, OUTCOMES, SEQ, STATS, COSTS =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8], keys[9]
  EMPTY = nil
  if argv[1] ~= COMMON then
    local c, q, lease, waiter_ttl, outcome_ttl, idle_ttl, buckets, wake =
      string.match(argv[1], '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
    BUCKETS = parse_buckets(buckets)
    C0, Q0, LEASE0, WAITER_TTL0 = tonumber(c), tonumber(q), tonumber(lease), tonumber(waiter_ttl)
    OUTCOME_TTL0, IDLE_TTL0, IDLE_TTL_ARG, WAKE0 = tonumber(outcome_ttl), tonumber(idle_ttl), idle_ttl, wake
    COMMON = argv[1]
  end
  C, Q, LEASE, WAITER_TTL, OUTCOME_TTL, IDLE_TTL, WAKE = C0, Q0, LEASE0, WAITER_TTL0, OUTCOME_TTL0, IDLE_TTL0, WAKE0
  PAUSE = 0
  -- One read of meta for what every script needs: the limits set at runtime (they hold for every
  -- process, whatever C and Q it was constructed with), the pause, the epoch, the C and Q last used.
  META_NOW = redis.call('HMGET', META, 'Cset', 'Qset', 'pause', 'epoch', 'C', 'Q', 'wpeak', 'touched', 'replid')
  if META_NOW[1] then C = tonumber(META_NOW[1]) end
  if META_NOW[2] then Q = tonumber(META_NOW[2]) end
  if META_NOW[3] then PAUSE = tonumber(META_NOW[3]) end
  EPOCH = META_NOW[4]
  WPEAK = nil
  clock = redis.call('TIME')
  if clock[1] ~= SECONDS then
    SECONDS, SECONDS_MS = clock[1], tonumber(clock[1]) * 1000
  end
  now = SECONDS_MS + math.floor(tonumber(clock[2]) / 1000)
  RUNNING, WAITING = nil, nil
  WRITTEN, HANDED = {}, {}
  SWEEP_OUTCOMES, SELF = true, nil
  FENCED = false
end

-- How a request ended, as the low 4 bits of its score in outcomes.
local ENDINGS = { released = 1, reclaimed = 2, expired = 3, lapsed = 4, cancelled = 5, disconnected = 6, unavailable = 7 }
local ENDING_NAMES = { 'released', 'reclaimed', 'expired', 'lapsed', 'cancelled', 'disconnected', 'unavailable' }

-- An integer as text, for redis.call and replies: a number given to either is formatted with
-- glibc's float printer ('%.17g', '%.14g': some 2k instructions each), '%d' is far cheaper, and
-- small ones are formatted once (for the library's life as functions; for the call by EVALSHA).
local DIGITS = {}
local function int(n)
  local text = DIGITS[n]
  if text then return text end
  text = string.format('%d', n)
  if n >= -1 and n < 1024 then DIGITS[n] = text end
  return text
end

local function write(command, key, ...)
  WRITTEN[key] = true
  return redis.call(command, key, ...)
end

local function epoch()
  if not EPOCH then
    EPOCH = string.format('%s.%06d', clock[1], tonumber(clock[2]))
    write('HSET', META, 'epoch', EPOCH)
  end
  return EPOCH
end


-- Note the C and Q this step decided by, for inspection (written only when they changed).
local function used(c, q)
  c, q = int(c), int(q)
  if META_NOW[5] ~= c or META_NOW[6] ~= q then
    redis.call('HSET', META, 'C', c, 'Q', q)
    META_NOW[5], META_NOW[6] = c, q
  end
end

-- Every script returns through this: the idle TTL of meta and of every key it added to. A reply
-- of a script with SELF ends with the grants to the caller's own waiters (id, token, ...).
local function reply(value)
  local touched = tonumber(META_NOW[8])
  if not touched or now - touched >= IDLE_TTL / 10 or now < touched then
    redis.call('HSET', META, 'touched', int(now))
    for i = 1, #KEYS do
      redis.call('PEXPIRE', KEYS[i], IDLE_TTL_ARG)
    end
  else
    for key in pairs(WRITTEN) do
      redis.call('PEXPIRE', key, IDLE_TTL_ARG)
    end
  end
  for _, item in ipairs(HANDED) do
    value[#value + 1] = item
  end
  return value
end

-- The reply of the scripts on the admission path (admit, release, cancel): reply()'s fields as one
-- string, "a|b|c...", which a client reads as one bulk string rather than an array, element by
-- element (no field has a '|': ids are agent ids, which have none, and '#', a serial). Every
-- field is text (numbers through int(): table.concat would format them with the float printer).
local function answer(value)
  return table.concat(reply(value), '|')
end

local function parse(info)
  -- agent, deadline (ms, -1: none), since (ms), token ('' while waiting)
  local agent, deadline, since, token = string.match(info or '|-1|0|', '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  return agent, tonumber(deadline), tonumber(since), token
end

-- How the request ended (released, cancelled, ...), nil if it has not (or it was forgotten).
local function outcome(id)
  local score = redis.call('ZSCORE', OUTCOMES, id)
  if score then return ENDING_NAMES[tonumber(score) % 16] end
  return nil
end

local function record(id, how)
  write('ZADD', OUTCOMES, int(now * 16 + ENDINGS[how]), id)
end

local function count(field, n)
  n = n or 1
  if redis.call('HINCRBY', STATS, field, n == 1 and '1' or n) == n then WRITTEN[STATS] = true end -- maybe a new key
end

local function peak(field, value)
  local was = redis.call('HGET', STATS, field)
  if value > tonumber(was or '0') then
    if not was then WRITTEN[STATS] = true end
    redis.call('HSET', STATS, field, int(value))
  end
end

local function agent_of(id)
  return string.match(id, '^(.*)#%d+$')
end

-- Rate limits
-- ===========
-- A gate's rate limits are token buckets kept as the in-process core keeps them
-- (_core/_bucket.py), on the server's clock: bucket i is the moment it is (or was) empty,
-- meta's b<i> in ms (absent: long ago, so full); its balance at t is min(burst, (t - empty) /
-- period). ARGV[1]'s buckets field lists them, 'r|t:period:window:depth,...' (r: counted in
-- requests, each request needs 1; t: in tokens, each needs its declared cost; period: ms per
-- token; window: ms from empty to full, burst * period; depth: ms of the deepest debt, -floor *
-- period). Every process of a gate must give the same rate limits, as it gives the same C.
--
-- A request starts only when a slot is free, nobody is queued ahead of it and every bucket
-- covers its need, taken from all of them at once. The head of the queue waiting for its tokens
-- keeps everyone behind it waiting (FIFO, as in-process). An arrival whose tokens could not come
-- before its queue deadline, behind what the queue ahead of it takes first (its count, and the
-- costs queued: meta's qcost), is refused at once, with the moment they could come.

parse_buckets = function(spec)
  local buckets = {}
  for unit, period, window, depth in string.gmatch(spec, '([rt]):([^:,]+):([^:,]+):([^:,]+)') do
    buckets[#buckets + 1] = {
      requests = unit == 'r', period = tonumber(period), window = tonumber(window), depth = tonumber(depth),
    }
  end
  return buckets
end

-- The buckets' empty moments for this call, read once.
local function empties()
  if not EMPTY then
    EMPTY = {}
    local fields = {}
    for i = 1, #BUCKETS do fields[i] = 'b' .. i end
    local stored = redis.call('HMGET', META, unpack(fields))
    for i = 1, #BUCKETS do EMPTY[i] = tonumber(stored[i]) or -math.huge end
  end
  return EMPTY
end

local function store_buckets(empty)
  local args = {}
  for i = 1, #BUCKETS do
    if empty[i] > -math.huge then
      args[#args + 1] = 'b' .. i
      args[#args + 1] = string.format('%.17g', empty[i])
    end
  end
  if #args > 0 then write('HSET', META, unpack(args)) end
end

local function need(bucket, cost)
  if bucket.requests then return 1 end
  return cost
end

-- True if every bucket holds what a request of this cost needs, now.
local function covers(cost)
  local empty = empties()
  for i, bucket in ipairs(BUCKETS) do
    if now < empty[i] + need(bucket, cost) * bucket.period then return false end
  end
  return true
end

-- When every bucket will hold what a request of this cost needs, if nothing else takes from them.
local function tokens_at(cost)
  local empty, at = empties(), -math.huge
  for i, bucket in ipairs(BUCKETS) do
    at = math.max(at, empty[i] + need(bucket, cost) * bucket.period)
  end
  return at
end

-- When the buckets could pay an arrival's cost behind the queue (each first supplies what the
-- waiters take, then its need: its balance now, at most its burst, then its rate), and the
-- bucket that decides it (the first of the latest).
local function tokens_behind(cost)
  local empty = empties()
  local tokens = tonumber(redis.call('HGET', META, 'qcost') or '0')
  local due, limiting = -math.huge, 1
  for i, bucket in ipairs(BUCKETS) do
    local ahead = tokens
    if bucket.requests then ahead = WAITING end
    local at = math.max(empty[i], now - bucket.window) + (ahead + need(bucket, cost)) * bucket.period
    if at > due then due, limiting = at, i end
  end
  return due, limiting
end

local function take(cost)
  local empty = empties()
  for i, bucket in ipairs(BUCKETS) do
    empty[i] = math.max(empty[i], now - bucket.window) + need(bucket, cost) * bucket.period
  end
  store_buckets(empty)
end

-- Give back a cost (a grant never used: every bucket; a refund: tokens only), never above a burst.
local function give(cost, tokens_only)
  local empty = empties()
  for i, bucket in ipairs(BUCKETS) do
    if not (tokens_only and bucket.requests) then
      empty[i] = math.max(empty[i] - need(bucket, cost) * bucket.period, now - bucket.window)
    end
  end
  store_buckets(empty)
end

-- Charge more tokens (a settled cost above the declared one), never below a bucket's floor.
local function charge(amount)
  local empty = empties()
  for i, bucket in ipairs(BUCKETS) do
    if not bucket.requests then
      empty[i] = math.min(math.max(empty[i], now - bucket.window) + amount * bucket.period, now + bucket.depth)
    end
  end
  store_buckets(empty)
end

-- Lower bucket i's balance to `left` if it holds more (the provider's remaining quota); true if it did.
local function lower(i, left)
  local empty, bucket = empties(), BUCKETS[i]
  if not bucket or left < 0 then return false end
  if left < math.min((now - empty[i]) / bucket.period, bucket.window / bucket.period) then
    empty[i] = now - left * bucket.period
    store_buckets(empty)
    return true
  end
  return false
end

local function cost_of(id)
  return tonumber(redis.call('HGET', COSTS, id) or '0')
end

-- A request's declared cost is kept while it waits or holds (a grant never used gives it back).
local function keep_cost(id, cost)
  if cost > 0 then write('HSET', COSTS, id, string.format('%.17g', cost)) end
end

local function forget_cost(id)
  if #BUCKETS > 0 then redis.call('HDEL', COSTS, id) end
end

-- A waiter of this cost joined the queue, or left it (the queue is already without it): qcost
-- follows, and an empty queue owes exactly nothing.
local function queue_cost(cost)
  if cost > 0 then write('HINCRBYFLOAT', META, 'qcost', string.format('%.17g', cost)) end
end

local function unqueue_cost(cost)
  if redis.call('ZCARD', WAITERS) == 0 then
    redis.call('HDEL', META, 'qcost')
  elseif cost > 0 then
    redis.call('HINCRBYFLOAT', META, 'qcost', string.format('%.17g', -cost))
  end
end

-- When the head of the queue will have its tokens, and whose it is (nil if it has them now, or
-- there is no head): its process syncs then, so that the head starts when its tokens are there.
local function head_ready()
  local head = redis.call('ZRANGE', WAITERS, '0', '0')[1]
  if not head then return nil end
  local at = tokens_at(cost_of(head))
  if at <= now then return nil end
  return at, agent_of(head)
end

-- admit's rate-limit refusal, before it would queue: refused (true, 'ms:i') when the tokens could
-- not come before its queue deadline behind the queue (or, not waiting, when a slot is free and
-- nobody queued but the tokens are not there now); (false) when the rate limits do not refuse it.
local function rate_refusal(cost, deadline, wait, running, waiting)
  if not wait and not (running < C and waiting == 0 and now >= PAUSE) then return false end
  local due, limiting = tokens_behind(cost)
  if wait and (deadline < 0 or due < deadline) then return false end
  return true, string.format('%.17g:%d', math.max(0, due - now, PAUSE - now), limiting)
end

-- A queued reply's value: its sequence, and '@ms' when the head is the caller's and waits for tokens.
local function queued_value(order)
  local at, whose = head_ready()
  if at and whose == SELF then return int(order) .. '@' .. string.format('%.17g', at - now) end
  return int(order)
end

-- Deadline-feasible admission
-- ===========================
-- meta's pace: the moving mean (ms, server clock) of the runs that ended normally (completed or
-- late), the newest weighing PACE_WEIGHT / C, as the core's recent_run_seconds (a gate without a
-- limit on running, C 2**53, weighs it PACE_WEIGHT). Kept by release.lua for a feasible gate's
-- processes. An arrival of a feasible gate that would queue is refused when its predicted start,
-- max(now, pause) + n * pace / C (n: the running excess over C, the queue ahead, itself), is at
-- or after its queue deadline, or a long run (RUNS paces: the core's FEASIBLE_RUNS) after it at or
-- after its deadline.
local PACE_WEIGHT = 0.2
local RUNS = 2
local UNLIMITED = 2 ^ 53

local function keep_pace(ran)
  local pace = tonumber(redis.call('HGET', META, 'pace') or '')
  if pace then
    local weight = PACE_WEIGHT
    if C < UNLIMITED then weight = PACE_WEIGHT / C end
    ran = pace + weight * (ran - pace)
  end
  write('HSET', META, 'pace', string.format('%.17g', ran))
end

-- admit's feasibility refusal: (true, 'wait ms:budget ms'), the predicted wait and the time to its
-- queue deadline, when it could not start in time; (false) when it could. queue_by and by: its
-- queue deadline and deadline (ms, -1: none).
local function infeasible(queue_by, by)
  local pace = tonumber(redis.call('HGET', META, 'pace') or '')
  local start = math.max(now, PAUSE)
  if pace and C < UNLIMITED then
    start = start + (math.max(0, RUNNING - C) + WAITING + 1) * pace / C
  end
  if (queue_by >= 0 and start >= queue_by) or (pace and by >= 0 and start + RUNS * pace >= by) then
    local budget = -1
    if queue_by >= 0 then budget = queue_by - now end
    return true, string.format('%.17g:%d', start - now, budget)
  end
  return false
end

-- A holder or waiter enters info (made anew when nobody held or waited).
local function describe(id, text)
  if RUNNING + WAITING == 0 then WRITTEN[INFO] = true end
  redis.call('HSET', INFO, id, text)
end

-- How far n jumps when fence() starts a new epoch: above every token the lost writes can have
-- issued (fewer than this many arrivals and grants in one replication lag), so that no (epoch, n)
-- repeats even for a process that pairs the new n with the epoch it knew before.
local FAILOVER_JUMP = '4294967296'

-- Before a fencing token is issued, once per call: is this the server whose replication history
-- the state was written under (meta's replid, the server's master_replid)? A replica promoted by a
-- failover, or a server restarted from a snapshot, has a new replication id, and its copy of the
-- state may lack the latest writes (replication is asynchronous): grants whose tokens it never
-- saw. The state then starts a new epoch, as a server that lost it all does, and n jumps above
-- those tokens. A client whose ACL refuses INFO leaves this unchecked.
local function fence()
  if FENCED then return end
  FENCED = true
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then return end
  local id = string.match(info, 'master_replid:(%x+)')
  local known = META_NOW[9]
  if not id or id == known then return end
  META_NOW[9] = id
  if known and EPOCH then
    EPOCH = string.format('%s.%06d', clock[1], tonumber(clock[2]))
    write('INCRBY', SEQ, FAILOVER_JUMP)
    write('HSET', META, 'epoch', EPOCH, 'replid', id)
    count('failovers')
  else
    write('HSET', META, 'replid', id)
  end
end

local function grant(id, agent, deadline, wake)
  fence()
  local token = redis.call('INCR', SEQ)
  if token == 1 then WRITTEN[SEQ] = true end
  if RUNNING == 0 then WRITTEN[HOLDERS] = true end
  redis.call('ZADD', HOLDERS, int(now + LEASE), id)
  describe(id, string.format('%s|%d|%d|%d', agent, deadline, now, token)) -- %d: cheaper than a number's tostring
  RUNNING = RUNNING + 1
  local fresh = redis.call('HINCRBY', STATS, 'admitted', '1') == 1
  if fresh then WRITTEN[STATS] = true end
  -- wpeak never exceeds peak_running (both follow every grant; wpeak restarts lower), so a grant
  -- at or below it is no new peak; fresh counters (a new stats key) may lack the peak.
  if not WPEAK then WPEAK = tonumber(META_NOW[7] or '0') end
  if RUNNING > WPEAK or fresh then
    peak('peak_running', RUNNING)
    if RUNNING > WPEAK then
      WPEAK = RUNNING
      redis.call('HSET', META, 'wpeak', int(RUNNING))
    end
  end
  if wake and agent == SELF then
    -- The reply of the script that made the grant tells the waiter's own process: no message.
    HANDED[#HANDED + 1] = id
    HANDED[#HANDED + 1] = int(token)
  elseif wake then
    -- A hint only: the grant is the holders entry above; a lost message costs the waiter one poll.
    -- "id epoch n": the token is n under this epoch, which its process may not have seen yet.
    redis.call('PUBLISH', WAKE .. agent, id .. ' ' .. epoch() .. ' ' .. token)
  end
  return token
end

local function enqueue(id, agent, deadline)
  local order = redis.call('INCR', SEQ)
  if order == 1 then WRITTEN[SEQ] = true end
  if WAITING == 0 then WRITTEN[WAITERS], WRITTEN[WDUE] = true, true end
  redis.call('ZADD', WAITERS, int(order), id)
  local due = now + WAITER_TTL
  if deadline >= 0 and deadline < due then due = deadline end
  redis.call('ZADD', WDUE, int(due), id)
  describe(id, string.format('%s|%d|%d|', agent, deadline, now))
  WAITING = WAITING + 1
  peak('peak_waiting', WAITING)
  return order
end

local function drop_waiter(id, how)
  local removed = redis.call('ZREM', WAITERS, id)
  if WAITING then WAITING = WAITING - removed end
  if #BUCKETS > 0 then
    unqueue_cost(cost_of(id))
    redis.call('HDEL', COSTS, id)
  end
  redis.call('ZREM', WDUE, id)
  redis.call('HDEL', INFO, id)
  record(id, how)
  count(how)
end

local function renew_waiter(id)
  WRITTEN[WAITERS], WRITTEN[INFO] = true, true -- a live place keeps its keys alive
  local _, deadline = parse(redis.call('HGET', INFO, id))
  local due = now + WAITER_TTL
  if deadline >= 0 and deadline < due then due = deadline end
  write('ZADD', WDUE, int(due), id)
end

-- tick's hand-off with rate limits: free slots go to the head of the queue while its tokens are
-- there (an expired head leaves first); a head waiting for its tokens keeps everyone behind it
-- waiting. Returns the slots left free (0: tick's own hand-off has nothing to do).
local function fill(free)
  while free > 0 and WAITING > 0 do
    local id = redis.call('ZRANGE', WAITERS, '0', '0')[1]
    if not id then break end
    local agent, deadline = parse(redis.call('HGET', INFO, id))
    local expired = deadline >= 0 and deadline <= now
    local cost = cost_of(id)
    if not expired and not covers(cost) then break end
    redis.call('ZREM', WAITERS, id)
    redis.call('ZREM', WDUE, id)
    WAITING = WAITING - 1
    unqueue_cost(cost)
    if expired then
      redis.call('HDEL', INFO, id)
      redis.call('HDEL', COSTS, id)
      record(id, 'expired')
      count('expired')
    else
      grant(id, agent, deadline, true)
      take(cost)
      free = free - 1
    end
  end
  return 0
end

-- Every script runs this first: reclaim lapsed leases, drop dead or expired waiters, and hand every
-- free slot to the head of the queue, inside this atomic step, so no newcomer can barge in. It
-- counts the holders and waiters (RUNNING, WAITING) as it goes; with none, it has nothing to sweep.
local function tick()
  RUNNING = redis.call('ZCARD', HOLDERS)
  if RUNNING > 0 then
    local lapsed = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', int(now), 'LIMIT', '0', SWEEP_ARG)
    for _, id in ipairs(lapsed) do
      RUNNING = RUNNING - redis.call('ZREM', HOLDERS, id)
      redis.call('HDEL', INFO, id)
      forget_cost(id)
      record(id, 'reclaimed')
      count('reclaimed')
    end
  end
  -- waiters and wdue hold the same ids: with no waiter there is nothing to sweep nor hand on
  WAITING = redis.call('ZCARD', WAITERS)
  if WAITING > 0 then
    local due = redis.call('ZRANGEBYSCORE', WDUE, '-inf', int(now), 'LIMIT', '0', SWEEP_ARG)
    for _, id in ipairs(due) do
      local _, deadline = parse(redis.call('HGET', INFO, id))
      if deadline >= 0 and deadline <= now then
        drop_waiter(id, 'expired')
      else
        drop_waiter(id, 'lapsed') -- its process stopped renewing its place: presumed dead
      end
    end
    local free = C - RUNNING
    if now < PAUSE then free = 0 end -- paused until a rate-limit reset: none starts
    if #BUCKETS > 0 then free = fill(free) end -- rate limits: the head may wait for its tokens
    while free > 0 and WAITING > 0 do
      local head = redis.call('ZPOPMIN', WAITERS)
      if #head == 0 then break end
      WAITING = WAITING - 1
      local id = head[1]
      redis.call('ZREM', WDUE, id)
      local agent, deadline = parse(redis.call('HGET', INFO, id))
      if deadline >= 0 and deadline <= now then
        redis.call('HDEL', INFO, id)
        record(id, 'expired')
        count('expired')
      else
        grant(id, agent, deadline, true)
        free = free - 1
      end
    end
  end
  if SWEEP_OUTCOMES then
    -- outcomes is ordered by when: its oldest are its lowest ranks
    local old = redis.call('ZCOUNT', OUTCOMES, '-inf', int((now - OUTCOME_TTL) * 16 + 15))
    if old > 0 then
      redis.call('ZREMRANGEBYRANK', OUTCOMES, '0', int(math.min(old, SWEEP) - 1))
    end
  end
end

local function counts()
  return RUNNING, WAITING
end
