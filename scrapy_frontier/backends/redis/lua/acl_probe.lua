-- Which of the frontier's commands and keys the Redis user running it may not use, asked of
-- the server's ACL (redis.acl_check_cmd: Redis 7.0 and later; no admin rights needed).
-- ARGV: the number of commands, the commands ("script|load" for a subcommand), then the keys
-- (passed in ARGV, not KEYS: a key the user may not touch would refuse the script itself).
-- Returns {denied commands, denied keys, 1}, or {{}, {}, 0} where Redis cannot tell.
if type(redis.acl_check_cmd) ~= 'function' then return {{}, {}, 0} end
local function allowed(...)
  local ok, yes = pcall(redis.acl_check_cmd, ...)
  return ok and yes == true  -- not ok: a command this server does not have (or renamed)
end
local count = tonumber(ARGV[1])
local commands, keys = {}, {}
for i = 2, count + 1 do
  local name = ARGV[i]
  local bar = string.find(name, '|', 1, true)
  local ok
  if bar then
    ok = allowed(string.sub(name, 1, bar - 1), string.sub(name, bar + 1))
  else
    ok = allowed(name)
  end
  if not ok then commands[#commands + 1] = name end
end
-- A key is the frontier's to read and write: HGETALL and HSET on it are allowed.
local hash_ok = allowed('HGETALL') and allowed('HSET')
for i = count + 2, #ARGV do
  local key = ARGV[i]
  if hash_ok and not (allowed('HGETALL', key) and allowed('HSET', key, 'f', 'v')) then
    keys[#keys + 1] = key
  end
end
return {commands, keys, 1}
