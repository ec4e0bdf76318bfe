-- limits: set C and/or Q for the whole cluster, from now on (every process's scripts read them).
-- ARGV 2 C, 3 Q (-1: unbounded); '' leaves one as it is. Raising C hands the freed slots to the head
-- of the queue at once (tick); lowering it interrupts no holder (they drain); lowering Q drops no
-- waiter. The set limits live in meta, so they last while the gate's state does (IDLE_TTL). A
-- call that changes the C or Q in force counts once in limit_changes (as in-process); one that
-- sets them as they are counts nothing.
-- Returns {running, waiting, epoch, C, Q}.
local newC, newQ = ARGV[2], ARGV[3]
local changed = false
epoch()
if newC ~= '' then
  write('HSET', META, 'Cset', newC)
  changed = changed or tonumber(newC) ~= C
  C = tonumber(newC)
end
if newQ ~= '' then
  write('HSET', META, 'Qset', newQ)
  changed = changed or tonumber(newQ) ~= Q
  Q = tonumber(newQ)
end
used(C, Q)
if changed then count('limit_changes') end
tick()
local running, waiting = counts()
return reply({running, waiting, EPOCH, C, Q})
