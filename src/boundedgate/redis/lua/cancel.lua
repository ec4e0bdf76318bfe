-- cancel: a request gives up before it began (cancelled by its caller, or its deadline passed on
-- the caller's clock). A waiter leaves the queue; a slot granted to it but never used passes on (it
-- no longer counts as admitted, and its tokens go back to the rate limits). An id the server does not know is recorded as ended, so that an
-- admit still in flight cannot bring it back, and counted: its process counted its arrival. ARGV 2
-- id, 3 how (cancelled | expired | disconnected | unavailable).
-- Returns, as one string of fields joined by '|' (answer()): what was removed (0 nothing, 1 a
-- place, 2 an unused slot), running, waiting, epoch, handed...: handed, the grants to the caller's
-- own waiters (id, token, ...), told here, not published.
local id, how = ARGV[2], ARGV[3]
SELF = agent_of(id)
epoch()
local removed = 0
if not outcome(id) then
  if redis.call('ZSCORE', WAITERS, id) then
    drop_waiter(id, how)
    removed = 1
  elseif redis.call('ZREM', HOLDERS, id) == 1 then
    redis.call('HDEL', INFO, id)
    if #BUCKETS > 0 then
      give(cost_of(id), false) -- it never used its tokens either
      forget_cost(id)
    end
    record(id, how)
    count('admitted', -1)
    count(how)
    removed = 2
  else
    record(id, how)
    count(how)
  end
end
tick()
local running, waiting = counts()
return answer({int(removed), int(running), int(waiting), EPOCH})
