-- Writes the meta hash KEYS[1] (ARGV: field, value, ...) unless it exists: one script, so
-- a connection lost midway never leaves some fields only (RedisFrontier._connect).
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
return 1
