-- Claim due pages atomically: no two workers get the same page.
local due, pages = KEYS[1], KEYS[2]
local untl, limit, hold_until = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fps = redis.call('ZRANGEBYSCORE', due, '-inf', untl, 'LIMIT', 0, limit)
local out = {}
for _, fp in ipairs(fps) do
  redis.call('ZADD', due, hold_until, fp)
  out[#out + 1] = fp
  out[#out + 1] = redis.call('HGET', pages, fp) or ''
end
return out
