-- round: see RedisFrontier.round(). One worker's I/O round in one call: its pushes, then
-- its completions (so a killed worker never leaves a completed lease without the URLs its
-- fetch found), then up to `want` claims, then the sizes and the next wake-up.
-- ARGV[11] expire batch, [12] liveness window, [13] want, [14] pushes, [15] completions,
-- [16] 1 to count the hosts ready now (a partitioned frontier shares its claims out by
-- them), [17] seconds ahead to claim a host not due yet when none is due now (claim_one),
-- then eight fields per push (as push.lua), then six per completion (as complete.lua).
local want, npush, ndone = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local pushed = {}
local ahead = tonumber(ARGV[17])
local at = 18
for _ = 1, npush do
  pushed[#pushed + 1] = push_one(ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2],
                                 ARGV[at + 3], ARGV[at + 4], tonumber(ARGV[at + 5]),
                                 tonumber(ARGV[at + 6]), tonumber(ARGV[at + 7]))
  at = at + 8
end
local done = {}
for _ = 1, ndone do
  local r = complete_one(ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
                         tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]))
  if r[1] == 0 then
    done[#done + 1] = {0}
  else
    done[#done + 1] = {1, fmt(r[2]), r[3]}
  end
  at = at + 6
end
local expired = {}
local leases = {}
if want > 0 then
  expired = expire(tonumber(ARGV[11]), tonumber(ARGV[12]))
  local deadline = lease_deadline(tonumber(ARGV[12]))
  prepare_claims()
  for _ = 1, want do
    local lease = claim_one(deadline, ahead)
    if not lease then break end
    leases[#leases + 1] = lease
  end
end
local wake = false
-- Completions start rests: their end is a wake-up even when the round claimed nothing.
if #leases < want or ndone > 0 then wake = next_wakeup() end
local ready = 0
if ARGV[16] == '1' then ready = redis.call('ZCOUNT', K_READY, '-inf', fmt(now)) end
return {fmt(now), #expired / 2, pushed, done, leases, wake, counted('front'), counted('back'),
        redis.call('HLEN', K_LEASES), ready}
