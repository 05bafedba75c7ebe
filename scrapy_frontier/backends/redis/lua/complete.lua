-- complete: see RedisFrontier.complete().
local host, id = ARGV[13], ARGV[14]
local fetch, at_least = tonumber(ARGV[15]), tonumber(ARGV[16])
local rec = redis.call('HGET', K_LEASES, host)
if not rec then return {0, fmt(now)} end
local lid = parse_lease(rec)
if lid ~= id then return {0, fmt(now)} end
local nc = release(host, fetch, at_least)
stat('completed', 1)
return {1, fmt(now), fmt(nc)}
