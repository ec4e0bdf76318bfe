-- limits: set C and/or Q for the whole cluster, from now on (every process's scripts read them).
-- ARGV 2 C, 3 Q (-1: unbounded); '' leaves one as it is. Raising C hands the freed slots to the head
-- of the queue at once (tick); lowering it interrupts no holder (they drain); lowering Q drops no
-- waiter. The set limits live in meta, so they last while the gate's state does (IDLE_TTL).
-- Returns {running, waiting, epoch, C, Q}.
local newC, newQ = ARGV[2], ARGV[3]
epoch()
if newC ~= '' then
  write('HSET', META, 'Cset', newC)
  C = tonumber(newC)
end
if newQ ~= '' then
  write('HSET', META, 'Qset', newQ)
  Q = tonumber(newQ)
end
used(C, Q)
count('limit_changes')
tick()
local running, waiting = counts()
return reply({running, waiting, EPOCH, C, Q})
