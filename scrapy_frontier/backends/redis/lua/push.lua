-- push: see RedisFrontier.push_many().
local out = {}
for i = 13, #ARGV, 3 do
  local host, lv, item = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  if redis.call('SISMEMBER', K_RETIRED, host) == 1 then
    stat('retired_items', 1)
    out[#out + 1] = 0
  else
    stat('pushed', 1)
    if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
      add_to_back(host, lv, item, false)
    else
      redis.call('RPUSH', fkey(lv), host .. '\0' .. item)
      redis.call('HINCRBY', K_COUNT, 'front', 1)
      fill_to_floor()
    end
    out[#out + 1] = 1
  end
end
return out
