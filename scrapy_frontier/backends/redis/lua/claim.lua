-- claim: see RedisFrontier.pop().
-- ARGV[14]: the claiming worker's liveness window (0: none). Its lease then lapses that
-- long after the claim unless the worker renews it (renew.lua), and never outlives
-- LEASE_T; without one it lasts LEASE_T.
local expired = expire(tonumber(ARGV[13]))
local live = tonumber(ARGV[14] or '0')
local deadline = now + LEASE_T
if live > 0 and live < LEASE_T then deadline = now + live end
redis.call('ZREMRANGEBYSCORE', K_REST, '-inf', fmt(now))
fill_to_floor()
for _ = 1, BMAX + 1 do
  local due = redis.call('ZRANGEBYSCORE', K_READY, '-inf', fmt(now), 'WITHSCORES',
                         'LIMIT', 0, WINDOW)
  if #due > 0 then
    local best, best_lv, best_slack, best_te = nil, -1, 0, 0
    local hosts = {}
    for i = 1, #due, 2 do hosts[#hosts + 1] = due[i] end
    local heads = redis.call('HMGET', K_HEAD, unpack(hosts))
    local fetches = redis.call('HMGET', K_FETCH, unpack(hosts))
    local queued = redis.call('HMGET', K_ACTIVE, unpack(hosts))
    for j, host in ipairs(hosts) do
      local t_e = tonumber(due[2 * j])
      local lv = tonumber(heads[j])
      local slack = -math.huge
      if fetches[j] then
        local fetch = tonumber(fetches[j])
        slack = t_e - tonumber(queued[j]) * (fetch + delay(fetch))
      end
      if lv > best_lv or (lv == best_lv and slack < best_slack) then
        best, best_lv, best_slack, best_te = host, lv, slack, t_e
      end
    end
    local item = redis.call('LPOP', bkey(best_lv, best))
    if redis.call('LLEN', bkey(best_lv, best)) == 0 then update_head(best, best_lv - 1) end
    redis.call('HINCRBY', K_ACTIVE, best, -1)
    redis.call('HINCRBY', K_COUNT, 'back', -1)
    redis.call('ZREM', K_READY, best)
    local id = redis.call('INCR', K_SEQ)
    redis.call('HSET', K_LEASES, best,
               id .. '|' .. best_lv .. '|' .. fmt(now) .. '|' .. fmt(best_te) .. '|' .. item)
    redis.call('ZADD', K_DEADLINES, fmt(deadline), best)
    stat('popped', 1)
    return {1, fmt(now), id, best, best_lv, item, fmt(deadline), fmt(best_te), #expired / 2}
  end
  if redis.call('HLEN', K_ACTIVE) < BMAX and front_len() > 0 then
    if not activate_one() then break end
  else
    break
  end
end
return {0, fmt(now), next_wakeup(), #expired / 2}
