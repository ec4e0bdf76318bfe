-- admit: a request arrives. Idempotent by id (a retry after a lost reply returns the first answer).
-- ARGV 2 id (the agent's id, '#', a serial), 3 remaining budget ms (-1: none), 4 wait (1: may
-- queue, 0: start now or not), 5 its cost for the rate limits (absent: 0), 6 for a feasible
-- gate only: the remaining budget to its deadline in ms (-1: none; 3 is to its queue deadline).
-- Returns, as one string of fields joined by '|' (answer()): state, value, running, waiting, epoch,
-- handed...; state 1 granted (value: token), 2 queued (value: arrival sequence), 3 full (value: ms
-- of a pause in force still to run, 0 if none), 4 already ended (value: how), 5 rate limited
-- (value: 'ms:i', the ms until its tokens could come, or a pause in force ends if later, and the
-- rate limit i that decides it), 6 infeasible (value: 'ms:ms', its predicted wait and its budget
-- to its queue deadline, -1: none); with rate limits, a queued reply's value is 'sequence@ms' when
-- the head of the queue is the caller's and waits ms for its tokens. handed: the grants its sweep
-- made to the caller's other waiters (id, token, ...).
local id, remaining, wait = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local cost = tonumber(ARGV[5] or '0')
local by = tonumber(ARGV[6] or '') -- nil: not a feasible gate
local agent = agent_of(id)
SELF = agent
SWEEP_OUTCOMES = false -- nothing ends here but by the sweep: release, cancel and sync forget
epoch()
used(C, Q)
tick()
-- A holder or a waiter has info (a holder's token, a waiter's none); an ended request, an outcome.
local known = redis.call('HGET', INFO, id)
if known then
  local _, _, _, token = parse(known)
  local running, waiting = counts()
  if token ~= '' then
    return answer({'1', token, int(running), int(waiting), EPOCH})
  end
  local order = redis.call('ZSCORE', WAITERS, id)
  if order then
    return answer({'2', order, int(running), int(waiting), EPOCH})
  end
end
local how = outcome(id)
if how then
  local running, waiting = counts()
  return answer({'4', how, int(running), int(waiting), EPOCH})
end
local deadline = -1
if remaining >= 0 then deadline = now + remaining end
local running, waiting = counts()
if running < C and waiting == 0 and now >= PAUSE and (#BUCKETS == 0 or covers(cost)) then
  local token = grant(id, agent, deadline, false)
  if #BUCKETS > 0 then
    take(cost)
    keep_cost(id, cost)
  end
  return answer({'1', int(token), int(running + 1), int(waiting), EPOCH})
end
if #BUCKETS > 0 then
  local refused, value = rate_refusal(cost, deadline, wait, running, waiting)
  if refused then
    count('rate_limited')
    return answer({'5', value, int(running), int(waiting), EPOCH})
  end
end
if wait and by then
  local deadline_by = -1
  if by >= 0 then deadline_by = now + by end
  local refused, value = infeasible(deadline, deadline_by)
  if refused then
    count('infeasible')
    return answer({'6', value, int(running), int(waiting), EPOCH})
  end
end
if wait and (Q < 0 or waiting < Q) then
  local order = enqueue(id, agent, deadline)
  if #BUCKETS > 0 then
    keep_cost(id, cost)
    queue_cost(cost)
    return answer({'2', queued_value(order), int(running), int(waiting + 1), EPOCH})
  end
  return answer({'2', int(order), int(running), int(waiting + 1), EPOCH})
end
count('rejected')
return answer({'3', int(math.max(0, PAUSE - now)), int(running), int(waiting), EPOCH})
