-- push: see RedisFrontier.push_many().
-- ARGV from 13 on, six per entry: host, level, item, seen-set key, member, mode.
-- mode 0: no seen set; 1: add member to the seen set once queued; 2: also drop the
-- entry if the member is there already. Test, push and mark in one script: two
-- workers pushing the same URL at once cannot both queue it.
-- Returns per entry: 1 queued, 0 refused (retired host), 2 duplicate.
local out = {}
for i = 13, #ARGV, 6 do
  local host, lv, item = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local seen_key, member, mode = ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5])
  if mode == 2 and redis.call('SISMEMBER', seen_key, member) == 1 then
    out[#out + 1] = 2
  elseif redis.call('SISMEMBER', K_RETIRED, host) == 1 then
    count_refused(host)
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
    if mode > 0 then redis.call('SADD', seen_key, member) end
    out[#out + 1] = 1
  end
end
return out
