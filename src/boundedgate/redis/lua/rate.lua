-- rate: what a process learns of the rate limits after an admission (see "Rate limits" in the
-- prelude). ARGV 2 what, 3 the calling process's agent id, then:
--   'settle'  a holder's real cost is known: ARGV 4 the difference to what it took (> 0: charged
--             to the limits counted in tokens, never below a floor; < 0: refunded, never above a
--             burst; a refund may let the head of the queue start). Not idempotent: sent once.
--   'lower'   the provider's remaining quota: ARGV 4, 5, ... pairs of (bucket number, remaining),
--             each bucket lowered to it if it holds more (never raised; nobody starts).
-- Returns, as one string of fields joined by '|' (answer()): buckets changed, running, waiting,
-- epoch, handed...: handed, the grants to the caller's own waiters (id, token, ...).
local what = ARGV[2]
SELF = ARGV[3]
local e = epoch()
tick() -- the queue brought up to now first: a head whose tokens came meanwhile starts before the change
local changed = 0
if #BUCKETS > 0 then
  if what == 'settle' then
    local extra = tonumber(ARGV[4])
    if extra > 0 then
      charge(extra)
      changed = 1
    elseif extra < 0 then
      give(-extra, true)
      changed = 1
      tick() -- the refund may start the head of the queue
    end
  elseif what == 'lower' then
    for i = 4, #ARGV - 1, 2 do
      if lower(tonumber(ARGV[i]), tonumber(ARGV[i + 1])) then changed = changed + 1 end
    end
  end
end
local running, waiting = counts()
return answer({int(changed), int(running), int(waiting), e})
