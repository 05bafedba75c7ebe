-- control: an operator's change to one host (scrapy frontier), atomic with the queues.
-- ARGV[11] op, ARGV[12] host, ARGV[13] value. Returns {op result, server time}.
local op, host, value = ARGV[11], ARGV[12], ARGV[13]
local function requeue(at)
  -- A host waiting in the ready set moves to its new next contact.
  if redis.call('ZSCORE', K_READY, host) then
    redis.call('ZADD', K_READY, fmt(at), host)
  end
end
-- A host of several connections: each of its idle connections in key moves to at(its time).
local function requeue_conns(key, at)
  for _, m in ipairs(members_of(host, conns_of(host))) do
    local t = redis.call('ZSCORE', key, m)
    if t then redis.call('ZADD', key, fmt(at(tonumber(t))), m) end
  end
end
local several = conns_of(host) > 1
if op == 'block' then
  local until_ = now + tonumber(value)   -- value: seconds, or inf
  redis.call('ZADD', K_BLOCKED, fmt(until_), host)
  mark_filled(K_BLOCKED)
  if several then
    requeue_conns(K_READY, function(t) return unblocked_at(host, t) end)
  else
    requeue(unblocked_at(host, tonumber(redis.call('ZSCORE', K_READY, host) or now)))
  end
  return {fmt(until_), fmt(now)}
elseif op == 'unblock' then
  local was = redis.call('ZREM', K_BLOCKED, host)
  if was == 1 then
    local rest = tonumber(redis.call('ZSCORE', K_REST, host) or '0')
    if several then
      -- Every idle connection waits for the host's latest rest.
      local function at() return math.max(now, rest) end
      requeue_conns(K_READY, at)
      requeue_conns(K_SPARE, at)
    else
      requeue(math.max(now, rest))
    end
  end
  return {was, fmt(now)}
elseif op == 'delay' then
  if tonumber(value) > 0 then
    redis.call('HSET', K_DELAY, host, value)
  else
    redis.call('HDEL', K_DELAY, host)
  end
  return {1, fmt(now)}
elseif op == 'budget' or op == 'rebudget' then
  -- value: pages (0: unlimited). budget: the host's own budget, kept. rebudget: its per-host
  -- policy's budget, below an own budget if it has one. A raised budget takes a capped host
  -- back; a budget reached retires it.
  local budget = tonumber(value)
  if op == 'budget' then
    redis.call('HSET', K_BUDGETS, host, value)
    -- An operator's budget releases a contained trap: it is not judged again.
    if redis.call('HGET', K_TRAPS, host) == 'contained' then
      redis.call('HSET', K_TRAPS, host, 'released')
    end
  else
    budget = tonumber(redis.call('HGET', K_BUDGETS, host) or value)
  end
  local n = tonumber(redis.call('HGET', K_FETCHED, host) or '0')
  local reopened = 0
  if redis.call('SISMEMBER', K_CAPPED, host) == 1 and (budget == 0 or n < budget) then
    redis.call('SREM', K_CAPPED, host)
    redis.call('SREM', K_RETIRED, host)
    reopened = 1
  elseif budget > 0 and n >= budget then
    retire_host(host, true)
  end
  return {reopened, fmt(now)}
elseif op == 'contain' then
  -- value: "fetched allowance". A crawler trap: its budget becomes its fetch count (at least
  -- fetched) plus allowance, below a lower budget of its own; returns the budget, kept as it
  -- was for a host contained already, or -1 for one an operator released.
  local state = redis.call('HGET', K_TRAPS, host)
  if state == 'released' then return {-1, fmt(now)} end
  local own = tonumber(redis.call('HGET', K_BUDGETS, host) or '0')
  if state == 'contained' then return {own, fmt(now)} end
  local seen, allowance = string.match(value, '^(%d+) (%d+)$')
  local n = tonumber(redis.call('HGET', K_FETCHED, host) or '0')
  if n < tonumber(seen) then
    n = tonumber(seen)
    redis.call('HSET', K_FETCHED, host, n)
  end
  local budget = n + tonumber(allowance)
  if own > 0 and own < budget then budget = own end
  redis.call('HSET', K_BUDGETS, host, budget)
  redis.call('HSET', K_TRAPS, host, 'contained')
  if n >= budget then retire_host(host, true) end
  return {budget, fmt(now)}
elseif op == 'retire' then
  return {#retire_host(host, false), fmt(now)}
elseif op == 'unretire' then
  -- Taken back by hand, whatever retired it; a host over its budget needs a higher budget.
  if redis.call('SISMEMBER', K_CAPPED, host) == 1 then
    return {-1, fmt(now)}
  end
  return {redis.call('SREM', K_RETIRED, host), fmt(now)}
end
return redis.error_reply('unknown control op ' .. tostring(op))
