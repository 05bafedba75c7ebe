-- complete: see RedisFrontier.complete().
-- ARGV[17]: the host's budget from the worker's settings (0: unlimited; -1: the lease is
-- handed back unfetched, not counted); the shared budgets hash (scrapy frontier budget)
-- overrides it. Counted here, so the budget holds for the whole crawl, whatever worker
-- fetches.
local host, id = ARGV[13], ARGV[14]
local fetch, at_least = tonumber(ARGV[15]), tonumber(ARGV[16])
-- ARGV[18]: seconds before now the answer was complete; the delay counts from then.
local ago = tonumber(ARGV[18] or '0')
local rec = redis.call('HGET', K_LEASES, host)
if not rec then return {0, fmt(now)} end
local lid = parse_lease(rec)
if lid ~= id then return {0, fmt(now)} end
local nc = release(host, fetch, at_least, ago)
stat('completed', 1)
local given = tonumber(ARGV[17] or '0')
local budget = tonumber(redis.call('HGET', K_BUDGETS, host) or math.max(given, 0))
-- The URLs dropped when this completion spent the host's budget; -1: it did not.
local capped = -1
if given >= 0 and (budget > 0 or redis.call('HLEN', K_BUDGETS) > 0) then
  local n = redis.call('HINCRBY', K_FETCHED, host, 1)
  if budget > 0 and n >= budget and redis.call('SISMEMBER', K_RETIRED, host) == 0 then
    capped = #retire_host(host, true)
  end
end
return {1, fmt(now), fmt(nc), capped}
