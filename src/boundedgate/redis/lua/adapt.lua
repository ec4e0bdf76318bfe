-- adapt: what one process heard from the provider, applied to the cluster's shared C as one
-- controller would apply it, whichever process heard it and however many heard it at once.
-- ARGV 2 what:
--   'pause'       a rate-limit 429 with its reset: no start for ARGV 3 ms (never shortens a pause
--                 in force); C is left alone
--   'overloaded'  a 503 / 529: cut C to max(floor, C * ARGV 4), unless the cluster's last cut is
--                 younger than the window (ARGV 3 ms): a burst seen by many processes is one cut
--   'cut'         a process's latency window asks for a cut by ARGV 4: as 'overloaded', of the
--                 controller's C as a real number (the core's window cuts its real value)
--   'grow'        a process's latency window asks for growth: C + ARGV 7, or + ARGV 9 times C if
--                 more, unless the cluster cut or grew within the window, and never beyond ARGV 8
--                 times the cluster's peak in flight since its last change of C (wpeak), nor
--                 beyond the ceiling
-- The controller's C is kept as a real number (Cvalue), as the core's AdaptiveLimit keeps it, and
-- C is its integer part: a cut's fraction counts for the growth after it.
-- ARGV 5 floor, 6 ceiling (both the controller's settings).
-- Returns {applied (1 if it took effect), C, running, waiting, epoch, ms since the cluster's
-- last cut (-1: never), ms of pause left}.
local what, window, factor = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local floor, ceiling, increase, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local ratio = tonumber(ARGV[9]) or 0 -- a process that sends none grows by ARGV 7 alone
epoch()
local applied = 0
local state = redis.call('HMGET', META, 'cut', 'grew', 'Cvalue', 'wpeak')
local cut, grew = tonumber(state[1]), tonumber(state[2])

-- The controller's C as a real number: its own, unless C was set otherwise since (by hand).
local value = tonumber(state[3]) or C
if math.floor(value) ~= C then value = C end

local function change(new)
  local newC = math.floor(new)
  WPEAK = redis.call('ZCARD', HOLDERS) -- the peak restarts here: the sweep's grants below raise it
  write('HSET', META, 'Cvalue', string.format('%.17g', new), 'wpeak', WPEAK)
  if newC ~= C then
    C = newC
    write('HSET', META, 'Cset', C)
    count('limit_changes')
  end
end

if what == 'pause' then
  local untl = now + window
  if untl > PAUSE then
    PAUSE = untl
    write('HSET', META, 'pause', untl)
  end
  count('pauses')
  applied = 1
elseif what == 'overloaded' or what == 'cut' then
  if not cut or now - cut >= window then
    local base = value -- a window cuts the real C; an overload the C in force, as the core's signal()
    if what == 'overloaded' then base = C end
    change(math.max(floor, base * factor))
    cut = now
    write('HSET', META, 'cut', now)
    count('cuts')
    applied = 1
  else
    count('suppressed')
  end
elseif what == 'grow' then
  local quiet = (not cut or now - cut >= window) and (not grew or now - grew >= window)
  local peak = tonumber(state[4]) or 0
  local grown = math.min(value + math.max(increase, ratio * value), cap * peak, ceiling)
  if quiet and peak >= C and grown > value then
    change(grown)
    write('HSET', META, 'grew', now)
    count('grown')
    applied = 1
  end
end
used(C, Q)
tick()
local running, waiting = counts()
local since = -1
if cut then since = now - cut end
return reply({applied, C, running, waiting, EPOCH, since, math.max(0, PAUSE - now)})
