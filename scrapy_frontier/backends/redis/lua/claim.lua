-- claim: see RedisFrontier.pop().
-- ARGV[12]: the claiming worker's liveness window (0: none); see lease_deadline.
local expired = expire(tonumber(ARGV[11]), tonumber(ARGV[12] or '0'))
local deadline = lease_deadline(tonumber(ARGV[12] or '0'))
prepare_claims()
local lease = claim_one(deadline)
if lease then
  return {1, fmt(now), lease[1], lease[2], lease[3], lease[4], lease[5], lease[6], #expired / 2}
end
return {0, fmt(now), next_wakeup(), #expired / 2}
