-- release: a holder ends (completed, late, failed, cut...) and its slot goes to the head of the queue.
-- Idempotent: the outcome record makes a retry a no-op, and keeps a late heartbeat from bringing
-- the id back. ARGV 2 id, 3 how it ended (completed | late | failed | cut: at its deadline |
-- aborted | leaked: collected unreleased), 4 '1' from a feasible gate's process: a run that ended
-- normally moves the pace (absent: not).
-- Returns, as one string of fields joined by '|' (answer()): removed (1 if it still held its slot),
-- running, waiting, epoch, C (the cluster's), handed...: handed, the grants to the caller's own
-- waiters (id, token, ...), told here, not published.
local id, how, paced = ARGV[2], ARGV[3], ARGV[4] == '1'
SELF = agent_of(id)
epoch()
-- A holder has no outcome (a released id is never counted again: sync does not reattach it), so
-- only an id that held no slot is looked up among the outcomes, to tell a retry.
local removed = redis.call('ZREM', HOLDERS, id)
if removed == 1 or outcome(id) ~= 'released' then
  if removed == 1 and paced and (how == 'completed' or how == 'late') then
    local info = redis.call('HGET', INFO, id)
    if info then
      local _, _, since = parse(info)
      keep_pace(now - since)
    end
  end
  redis.call('HDEL', INFO, id)
  forget_cost(id)
  record(id, 'released')
  count(how)
end
tick()
local running, waiting = counts()
return answer({int(removed), int(running), int(waiting), EPOCH, int(C)})
