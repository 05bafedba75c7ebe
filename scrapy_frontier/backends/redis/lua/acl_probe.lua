-- Which of the frontier's commands and keys the Redis user running it may not use, asked of
-- the server's ACL (redis.acl_check_cmd: Redis 7.0 and later; no admin rights needed).
-- ARGV: the number of commands; then each command as its argument count and its arguments,
-- a whole well-formed call (Redis before 8.x does not check the arity there, and reads past
-- the arguments of a short call); then the keys, in ARGV rather than KEYS: a key the user may
-- not touch would refuse the script itself.
-- Returns {denied commands (as "name" or "name|sub"), denied keys, 1}; {{}, {}, 0} where
-- Redis cannot tell.
if type(redis.acl_check_cmd) ~= 'function' then return {{}, {}, 0} end
local function allowed(...)
  local ok, yes = pcall(redis.acl_check_cmd, ...)
  return ok and yes == true  -- not ok: a command this server does not have (or renamed)
end
local commands, keys = {}, {}
local i = 2
for _ = 1, tonumber(ARGV[1]) do
  local argc = tonumber(ARGV[i])
  local call = {}
  for j = 1, argc do call[j] = ARGV[i + j] end
  if not allowed(unpack(call)) then
    local name = string.lower(call[1])
    if argc > 1 and (name == 'script' or name == 'cluster') then
      name = name .. '|' .. string.lower(call[2])
    end
    commands[#commands + 1] = name
  end
  i = i + argc + 1
end
-- A key is the frontier's to read and to write (by any of a few commands, so that one
-- command denied is not taken for a key denied).
for k = i, #ARGV do
  local key = ARGV[k]
  local read = allowed('HGETALL', key) or allowed('TYPE', key) or allowed('EXISTS', key)
  local write = allowed('HSET', key, 'f', 'v') or allowed('HSETNX', key, 'f', 'v')
    or allowed('DEL', key)
  if not (read and write) then keys[#keys + 1] = key end
end
return {commands, keys, 1}
