-- census: see RedisFrontier.census(). Reads only: hash lengths and sorted-set counts.
local counts = redis.call('HMGET', K_COUNT, 'front', 'back')
local st = redis.call('HMGET', K_STATS, 'completed', 'expired', 'hold_us')
local function n(x) return tonumber(x or '0') end
-- Hosts with URLs held by an operator's block (their ready time is the block's end).
local blocked = 0
for _, host in ipairs(redis.call('ZRANGEBYSCORE', K_BLOCKED, '(' .. fmt(now), '+inf')) do
  local k = conns_of(host)
  local members = {host}
  if k > 1 then members = members_of(host, k) end  -- (one per connection)
  for _, m in ipairs(members) do
    local at = redis.call('ZSCORE', K_READY, m)
    if at and tonumber(at) > now then
      blocked = blocked + 1
      break
    end
  end
end
return {
  number_at(K_COUNT, 'front', counts[1]), number_at(K_COUNT, 'back', counts[2]),
  redis.call('HLEN', K_LEASES),
  redis.call('HLEN', K_ACTIVE),
  redis.call('ZCARD', K_READY),
  redis.call('ZCOUNT', K_READY, '-inf', fmt(now)),
  redis.call('SCARD', K_RETIRED),
  redis.call('ZCOUNT', K_REST, '(' .. fmt(now), '+inf'),
  n(st[1]) + n(st[2]),
  n(st[3]),
  redis.call('HLEN', K_HEAD),
  blocked,
}
