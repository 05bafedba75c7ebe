-- retire: see RedisFrontier.retire().
local host = ARGV[13]
if redis.call('SADD', K_RETIRED, host) == 0 then return {} end
stat('retired_hosts', 1)
local dropped = {}
if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
  for lv = F, 1, -1 do
    local items = redis.call('LRANGE', bkey(lv, host), 0, -1)
    for _, item in ipairs(items) do dropped[#dropped + 1] = item end
    redis.call('DEL', bkey(lv, host))
  end
  redis.call('HSET', K_ACTIVE, host, 0)
  redis.call('HDEL', K_HEAD, host)
  redis.call('HINCRBY', K_COUNT, 'back', -#dropped)
  redis.call('ZREM', K_READY, host)
  if redis.call('HEXISTS', K_LEASES, host) == 0 then
    deactivate(host)
    fill_to_floor()
  end
end
stat('retired_items', #dropped)
return dropped
