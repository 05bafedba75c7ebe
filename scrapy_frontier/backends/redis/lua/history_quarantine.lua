-- Move an unreadable page record to the quarantine, if the record is still that one
-- (a worker may have written a good one since it was read). Returns 1 if moved.
local pages, due, weight, quarantine = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fp, raw, entry = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', pages, fp) ~= raw then
  return 0
end
redis.call('HDEL', pages, fp)
redis.call('ZREM', due, fp)
redis.call('ZREM', weight, fp)
redis.call('HSET', quarantine, fp, entry)
return 1
