-- sync: one process's heartbeat and poll for one gate, covering all its ids at once.
-- ARGV 2 agent, 3 number of holders H, then H (holder id, token) pairs, then (waiter id, remaining
-- ms) pairs. Holders: renew the lease; one found missing (reclaimed after a stall, or forgotten by a
-- restarted server) is counted again ("reattached": the holder is still running, so the count must
-- include it, even above C), unless it has already ended. One found with a token other than the one
-- its process sent was counted again by an earlier sync whose reply was lost: it is reported
-- "reattached" again, with its token, so that its process always learns it lost its lease.
-- Waiters: renew the place; report a grant whose message may have been lost, or how the place
-- ended; one the server forgot arrives again.
-- Returns {epoch, running, waiting, id, what, value, id, what, value, ...} for ids that changed;
-- with rate limits, ('', 'ready', ms) when the head of the queue is this process's and its tokens
-- come in ms.
local agent = ARGV[2]
epoch()
tick()
local out = {'', 0, 0} -- the epoch and the counts as the script ends
local function report(id, what, value)
  out[#out + 1] = id
  out[#out + 1] = what
  out[#out + 1] = value
end
local holders = tonumber(ARGV[3])
local i = 4
for _ = 1, holders do
  local id, known = ARGV[i], ARGV[i + 1]
  i = i + 2
  if redis.call('ZSCORE', HOLDERS, id) then
    write('ZADD', HOLDERS, int(now + LEASE), id)
    WRITTEN[INFO] = true -- a live holder keeps its keys alive
    local _, _, _, token = parse(redis.call('HGET', INFO, id))
    if token ~= known then
      report(id, 'reattached', token) -- its process missed the reply that counted it again
    end
  else
    local how = outcome(id)
    if how and how ~= 'reclaimed' then
      report(id, 'ended', how) -- released or cancelled meanwhile: never resurrect it
    else
      if how then
        redis.call('ZREM', OUTCOMES, id)
      end
      fence()
      local token = write('INCR', SEQ)
      write('ZADD', HOLDERS, int(now + LEASE), id)
      write('HSET', INFO, id, string.format('%s|-1|%d|%d', agent, now, token))
      RUNNING = RUNNING + 1
      count('reattached')
      peak('peak_running', RUNNING)
      report(id, 'reattached', token)
    end
  end
end
while i < #ARGV do
  local id, remaining = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  if redis.call('ZSCORE', WAITERS, id) then
    renew_waiter(id)
  elseif redis.call('ZSCORE', HOLDERS, id) then
    write('ZADD', HOLDERS, int(now + LEASE), id)
    local _, _, _, token = parse(redis.call('HGET', INFO, id))
    report(id, 'granted', token)
  else
    local how = outcome(id)
    if how then
      report(id, how, 0)
    else
      -- Forgotten (a restart without persistence): it arrives again, at the back of the queue.
      local deadline = -1
      if remaining >= 0 then deadline = now + remaining end
      local running, waiting = counts()
      if running < C and waiting == 0 and now >= PAUSE and (#BUCKETS == 0 or covers(0)) then
        report(id, 'granted', grant(id, agent, deadline, false))
        if #BUCKETS > 0 then take(0) end -- its cost was forgotten with the gate: 0
      else
        enqueue(id, agent, deadline)
        report(id, 'requeued', 0)
      end
    end
  end
end
if #BUCKETS > 0 then
  -- The head of the queue is this process's and waits for its tokens: it syncs again when they come.
  local at, whose = head_ready()
  if at and whose == agent then report('', 'ready', string.format('%.17g', at - now)) end
end
out[1] = EPOCH
out[2], out[3] = counts()
return reply(out)
