-- complete: see RedisFrontier.complete() and complete_one.
-- ARGV[11..16]: host, lease id, fetch seconds, pace seconds, rest seconds, budget.
local done = complete_one(ARGV[11], ARGV[12], tonumber(ARGV[13]), tonumber(ARGV[14]),
                          tonumber(ARGV[15]), tonumber(ARGV[16] or '0'))
if done[1] == 0 then return {0, fmt(now)} end
return {1, fmt(now), fmt(done[2]), done[3]}
