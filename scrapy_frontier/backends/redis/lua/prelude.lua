-- Shared by every frontier script: arguments, keys, and the helpers.
-- ARGV[1..10] is the same head for every script (RedisFrontier._head);
-- op-specific arguments start at ARGV[11].
local P = ARGV[1]
-- The meta hash is written when a frontier is first opened: without it the state is gone
-- (Redis restarted without persistence, or the keys were deleted). Changing nothing then
-- is what lets the workers stop and say so instead of "finishing" an empty frontier.
-- The same call says whether a host was ever pushed with several connections (P conns
-- exists): MULTI false, every host has one connection and no script reads P conns.
local present = redis.call('EXISTS', P .. 'meta', P .. 'conns')
if present == 0 then
  return redis.error_reply('FRONTIER_GONE the frontier under ' .. P .. ' has no meta key')
end
local MULTI = present == 2
local F = tonumber(ARGV[2])
local B = tonumber(ARGV[3])
local BMAX = tonumber(ARGV[4])
local WEIGHTS = {}  -- of the front queues, level 1 first (FrontQueueChooser.weights)
for w in string.gmatch(ARGV[5], '%S+') do WEIGHTS[#WEIGHTS + 1] = tonumber(w) end
local LEASE_T = tonumber(ARGV[6])
-- The rests of a lapse (see expire), computed by the client's DelayPolicy: after a fetch
-- that ran the whole lease (delay(LEASE_T)), and the pace of a host never measured (delay(0)).
local LAPSE_REST, FIRST_PACE = string.match(ARGV[7], '^(%S+) (%S+)$')
LAPSE_REST, FIRST_PACE = tonumber(LAPSE_REST), tonumber(FIRST_PACE)
local BUDGET = {tonumber(ARGV[8])}
local WINDOW = tonumber(ARGV[9])
-- Park-Miller generator seeded by the client on every call: Redis before 7 reseeds
-- Lua's math.random identically for every script, which would always pick one level.
local SEED = {tonumber(ARGV[10])}
local function rand()
  SEED[1] = (SEED[1] * 16807) % 2147483647
  return SEED[1] / 2147483647
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function fmt(x) return string.format('%.6f', x) end
-- A field the frontier keeps as a number holds something else: say which key and field
-- (the client turns FRONTIER_DAMAGED into an error that names them).
local function damaged(key, field, raw, wanted)
  error({err = 'FRONTIER_DAMAGED ' .. key .. ' field ' .. field .. ' holds '
    .. string.format('%q', tostring(raw)) .. ', not ' .. (wanted or 'a number')})
end
local function number_at(key, field, raw)
  local n = tonumber(raw or '0')
  if n == nil then damaged(key, field, raw) end
  return n
end
local K_COUNT, K_ACTIVE, K_READY = P .. 'count', P .. 'active', P .. 'ready'
local K_REST, K_FETCH, K_MINREST = P .. 'rest', P .. 'fetch', P .. 'minrest'
local K_RETIRED, K_LEASES, K_DEADLINES = P .. 'retired', P .. 'leases', P .. 'deadlines'
local K_DROPPED, K_SEQ, K_STATS = P .. 'dropped', P .. 'seq', P .. 'stats'
local K_HEAD = P .. 'head'
-- Hosts of several connections: conns (host -> connections, as the last push of the host
-- while it had no back queue said; read when it gets one), spare (connection -> its rest
-- end: idle connections of an active host with nothing queued). Connection c (1..k) of such
-- a host is the member "host NUL c" of ready, leases, deadlines and spare; a host of one
-- connection is its own member, as if no host had more.
local K_CONNS, K_SPARE = P .. 'conns', P .. 'spare'
-- Operators' controls (scrapy frontier): blocks (host -> end, server time, inf: until
-- unblocked), delays (host -> minimum rest), budgets (host -> pages), fetch counts and
-- the retired hosts that were retired for reaching their budget.
local K_BLOCKED, K_DELAY, K_BUDGETS = P .. 'blocked', P .. 'delay', P .. 'budgets'
local K_FETCHED, K_CAPPED = P .. 'fetched', P .. 'capped'
-- Crawler traps (host -> "contained", or "released" by an operator's budget).
local K_TRAPS = P .. 'traps'
local function fkey(lv) return P .. 'f:' .. lv end
local function bkey(lv, host) return P .. 'b:' .. lv .. ':' .. host end
-- Connections (see K_CONNS): the member of connection c of a host of several, the host of a
-- member, a host's connections (1 for a host of one), and its connections' members.
local function conn_of(host, c) return host .. '\0' .. c end
local function host_of(member)
  local i = string.find(member, '\0', 1, true)
  if i then return string.sub(member, 1, i - 1) end
  return member
end
local function conns_of(host)
  if not MULTI then return 1 end
  return tonumber(redis.call('HGET', K_CONNS, host) or '1')
end
local function members_of(host, k)
  local out = {}
  for c = 1, k do out[c] = conn_of(host, c) end
  return out
end
-- The lease record of the member among a host's k connections that holds lease id, if any.
local function find_lease(host, id)
  local k = conns_of(host)
  if k == 1 then return nil, nil end
  local members = members_of(host, k)
  local recs = redis.call('HMGET', K_LEASES, unpack(members))
  for c = 1, k do
    local rec = recs[c]
    if rec and string.match(rec, '^(%d+)|') == id then return members[c], rec end
  end
  return nil, nil
end
-- Whether a host of k connections has a lease out other than on member but.
local function leased_besides(host, k, but)
  local recs = redis.call('HMGET', K_LEASES, unpack(members_of(host, k)))
  for c = 1, k do
    if recs[c] and conn_of(host, c) ~= but then return true end
  end
  return false
end

-- A host's pace, kept in K_FETCH as "<fetch> <pace>" (release writes it): its last fetch
-- time, and the rest the client's policy gave that fetch (DelayPolicy.delay, before the
-- floors). The scripts never compute a rest: they read it here or are sent it.
local function paced(host, raw)
  local i = string.find(raw, ' ', 1, true)
  local fetch = i and tonumber(string.sub(raw, 1, i - 1))
  local pace = i and tonumber(string.sub(raw, i + 1))
  if not (fetch and pace) then damaged(K_FETCH, host, raw, '"<fetch> <pace>"') end
  return fetch, pace
end

-- Counters add up in STATS and reach K_STATS once per script call (flush_stats, which
-- load_script's wrapper calls after the script's body): one HINCRBY per counter, not per
-- event.
local STATS = {}
local function stat(name, n) STATS[name] = (STATS[name] or 0) + n end
-- The URL counts (K_COUNT front and back) likewise: read once, changed here, written once.
local COUNT = {}
local COUNT_DELTA = {front = 0, back = 0}
local function count(field, n) COUNT_DELTA[field] = COUNT_DELTA[field] + n end
local function counted(field)
  if COUNT[field] == nil then
    COUNT[field] = number_at(K_COUNT, field, redis.call('HGET', K_COUNT, field))
  end
  return COUNT[field] + COUNT_DELTA[field]
end
local function flush_stats()
  for name, n in pairs(STATS) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, name, n) end
  end
  STATS = {}
  for field, n in pairs(COUNT_DELTA) do
    if n ~= 0 then redis.call('HINCRBY', K_COUNT, field, n) end
    COUNT_DELTA[field] = 0
  end
  COUNT = {}
end
-- Whether a key that is mostly empty (retired hosts, blocks, minimum rests, operators'
-- delays and budgets) holds anything, read once per call; a script that adds to one
-- marks it (mark_filled), so the answer stays true.
local FILLED = {}
local function filled(key, len_cmd)
  local f = FILLED[key]
  if f == nil then
    f = redis.call(len_cmd, key) > 0
    FILLED[key] = f
  end
  return f
end
local function mark_filled(key) FILLED[key] = true end
local function is_retired(host)
  return filled(K_RETIRED, 'SCARD') and redis.call('SISMEMBER', K_RETIRED, host) == 1
end
-- Lengths of the front queues, read once per call and kept here as they change.
local FLEN = {}
local function front_queue_len(lv)
  if FLEN[lv] == nil then FLEN[lv] = redis.call('LLEN', fkey(lv)) end
  return FLEN[lv]
end

-- A URL of a retired host kept out of the queues: counted as over budget or retired.
local function count_refused(host)
  if redis.call('SISMEMBER', K_CAPPED, host) == 1 then
    stat('budget_items', 1)
    return true
  end
  stat('retired_items', 1)
  return false
end

-- The later of t and the end of the host's block, if it is blocked.
local function unblocked_at(host, t)
  if not filled(K_BLOCKED, 'ZCARD') then return t end
  local b = redis.call('ZSCORE', K_BLOCKED, host)
  if b then
    local until_ = tonumber(b)
    if until_ > now then return math.max(t, until_) end
  end
  return t
end

-- Highest non-empty level of a host's back queue, kept in K_HEAD.
local function update_head(host, from)
  for lv = from, 1, -1 do
    if redis.call('LLEN', bkey(lv, host)) > 0 then
      redis.call('HSET', K_HEAD, host, lv)
      return
    end
  end
  redis.call('HDEL', K_HEAD, host)
end

-- A host's idle connections (k, default 1) go into the ready set, at the host's rest.
local function schedule(host, k)
  local s = redis.call('ZSCORE', K_REST, host)
  local t_e = now
  if s then t_e = tonumber(s) end
  if (k or 1) == 1 then
    redis.call('ZADD', K_READY, fmt(unblocked_at(host, t_e)), host)
    return
  end
  local at = fmt(unblocked_at(host, t_e))
  local args = {}
  for _, m in ipairs(members_of(host, k)) do
    args[#args + 1] = at
    args[#args + 1] = m
  end
  redis.call('ZADD', K_READY, unpack(args))
end

-- A host of several connections has URLs again: its spare connections go into the ready
-- set, each at its own rest end; gathered (all: spare or ready but the leased), every idle
-- one waits for the host's one rest, the latest of theirs.
local function wake_spare(host, k, gathered)
  local spare = {}
  for _, m in ipairs(members_of(host, k)) do
    local t = redis.call('ZSCORE', K_SPARE, m)
    if t then spare[#spare + 1] = {m, tonumber(t)} end
  end
  if #spare == 0 then return end
  local at
  if gathered then
    at = math.max(now, tonumber(redis.call('ZSCORE', K_REST, host) or '0'))
    for _, m in ipairs(members_of(host, k)) do
      if redis.call('ZSCORE', K_READY, m) then
        redis.call('ZADD', K_READY, fmt(unblocked_at(host, at)), m)
      end
    end
  end
  for _, e in ipairs(spare) do
    redis.call('ZREM', K_SPARE, e[1])
    redis.call('ZADD', K_READY, fmt(unblocked_at(host, at or e[2])), e[1])
  end
end

-- A host of several connections has nothing queued any more: its idle connections leave
-- the ready set as spare ones, with their rest ends kept (a ready entry stands for a URL).
local function spare_idle(host, k)
  for _, m in ipairs(members_of(host, k)) do
    local t = redis.call('ZSCORE', K_READY, m)
    if t then
      redis.call('ZREM', K_READY, m)
      redis.call('ZADD', K_SPARE, t, m)
    end
  end
end

-- k: the host's connections when it gets its back queue with this URL (nil otherwise).
-- wake: a push whose host's lease does not end in the same round (see lease_ended).
local function add_to_back(host, lv, item, at_head, k, wake)
  if at_head then
    redis.call('LPUSH', bkey(lv, host), item)
  else
    redis.call('RPUSH', bkey(lv, host), item)
  end
  local q = redis.call('HINCRBY', K_ACTIVE, host, 1)
  count('back', 1)
  if lv > tonumber(redis.call('HGET', K_HEAD, host) or '0') then
    redis.call('HSET', K_HEAD, host, lv)
  end
  if q == 1 then
    if k and k > 1 then
      schedule(host, k)
    elseif redis.call('HEXISTS', K_LEASES, host) == 0 then
      -- An active host of one connection with nothing queued holds its lease: this one
      -- gets its back queue, or has several connections (see lease_ended).
      if k or not MULTI then
        schedule(host)
      elseif wake then
        wake_spare(host, conns_of(host), false)
      end
    end
  end
end

-- FrontQueueChooser.choose's draw: which levels are non-empty is known only here.
local function choose_level()
  local total = 0
  local levels = {}
  for lv = 1, F do
    if front_queue_len(lv) > 0 then
      levels[#levels + 1] = lv
      total = total + WEIGHTS[lv]
    end
  end
  if #levels == 0 then return nil end
  if #levels == 1 then return levels[1] end
  local x = rand() * total
  for _, lv in ipairs(levels) do
    x = x - WEIGHTS[lv]
    if x < 0 then return lv end
  end
  return levels[#levels]
end

local function split(entry)
  local i = string.find(entry, '\0', 1, true)
  return string.sub(entry, 1, i - 1), string.sub(entry, i + 1)
end

-- Mercator refill: move front heads into back queues until a host gets one.
local function activate_one()
  while BUDGET[1] > 0 do
    local lv = choose_level()
    if not lv then return false end
    BUDGET[1] = BUDGET[1] - 1
    FLEN[lv] = front_queue_len(lv) - 1  -- (choose_level read it: lv is not empty)
    local entry = redis.call('LPOP', fkey(lv))
    count('front', -1)
    local host, item = split(entry)
    if is_retired(host) then
      -- Over budget: counted only; retired: also reported (the dropped list).
      if not count_refused(host) then redis.call('RPUSH', K_DROPPED, entry) end
    else
      local activating = redis.call('HEXISTS', K_ACTIVE, host) == 0
      if activating then
        redis.call('HSET', K_ACTIVE, host, 0)
        stat('activations', 1)
      end
      add_to_back(host, lv, item, false, activating and conns_of(host) or nil)
      if activating then return true end
    end
  end
  return false
end

local function front_len()
  return counted('front')
end

local function fill_to_floor()
  for _ = 1, B + 1 do
    if redis.call('HLEN', K_ACTIVE) >= B or front_len() == 0 then return end
    if not activate_one() then return end
  end
end

local function deactivate(host)
  redis.call('HDEL', K_ACTIVE, host)
  redis.call('HDEL', K_FETCH, host)
  if MULTI then
    local k = conns_of(host)
    if k > 1 then redis.call('ZREM', K_SPARE, unpack(members_of(host, k))) end
  end
  stat('releases', 1)
end

-- A lease of a host (member: its connection) ended and nothing is queued: with another
-- lease out, a connection of a host of several waits as a spare one, resting until at
-- (or its host's block); else the host gives up its back queue. Returns whether it kept it.
local function idle_or_deactivate(host, member, at)
  if member ~= host and leased_besides(host, conns_of(host), member) then
    redis.call('ZADD', K_SPARE, fmt(unblocked_at(host, at)), member)
    return true
  end
  deactivate(host)
  fill_to_floor()
  return false
end

-- A lease of a host of several connections ended (member: its connection, ready again)
-- with URLs queued. A URL that reaches a host of several connections with nothing queued
-- wakes its spare connections at their own rest ends (wake_spare), unless the push comes
-- in the round that ends one of the host's leases: the links of a page, pushed before
-- their fetch's end is sent (so that no completed lease is without them). The core, told
-- of the end first, wakes the spare connections only after it; so do these, here: at their
-- own rest ends while another lease is out; else, as in the core when the host gave its
-- back queue up with its last lease and got it again with those links, all at the host's
-- one rest.
local function lease_ended(host, member)
  local k = conns_of(host)
  wake_spare(host, k, not leased_besides(host, k, member))
end

-- End of a fetch (complete or expiry) on member (the host, or a connection of a host of
-- several): it rests rest seconds (or more: the floors kept here, robots.txt's minimum
-- rest and an operator's delay), then is ready again or gives up its back queue. fetch,
-- pace: kept as the host's K_FETCH entry (fetch nil: the entry stored stays). not_before:
-- the ready time when its lease was claimed (a lease claimed ahead and given back
-- unfetched must not end the rest it was claimed in). A host of several connections keeps
-- one rest, the latest of theirs.
local function release(member, fetch, pace, rest, not_before)
  local host = member
  if MULTI then host = host_of(member) end
  if filled(K_MINREST, 'HLEN') then
    local mr = tonumber(redis.call('HGET', K_MINREST, host) or '0')
    if mr > rest then rest = mr end
  end
  if filled(K_DELAY, 'HLEN') then
    local od = tonumber(redis.call('HGET', K_DELAY, host) or '0')
    if od > rest then rest = od end
  end
  local nc = now + rest
  if not_before and not_before > nc then nc = not_before end
  redis.call('HDEL', K_LEASES, member)
  redis.call('ZREM', K_DEADLINES, member)
  if member == host then
    redis.call('ZADD', K_REST, fmt(nc), host)
  else
    local kept = tonumber(redis.call('ZSCORE', K_REST, host) or '0')
    redis.call('ZADD', K_REST, fmt(math.max(kept, nc)), host)
  end
  local q = tonumber(redis.call('HGET', K_ACTIVE, host) or '0')
  if q > 0 then
    if fetch then
      redis.call('HSET', K_FETCH, host, fmt(math.max(0, fetch)) .. ' ' .. fmt(pace))
    end
    redis.call('ZADD', K_READY, fmt(unblocked_at(host, nc)), member)
    if member ~= host then lease_ended(host, member) end
    -- The rest kept before the host's next URL (the core's politeness_hold_seconds).
    stat('hold_us', math.floor((nc - now) * 1000000))
  elseif idle_or_deactivate(host, member, nc) and fetch then
    redis.call('HSET', K_FETCH, host, fmt(math.max(0, fetch)) .. ' ' .. fmt(pace))
  end
  return nc
end

local function parse_lease(rec)
  local _, e, id, lv, handed, ready = string.find(rec, '^(%d+)|(%d+)|([^|]*)|([^|]*)|')
  return id, tonumber(lv), tonumber(handed), tonumber(ready), string.sub(rec, e + 1)
end

-- A lease given back unfetched (HAND_BACK): its item goes back to the head of its host's
-- queue, as a lapsed lease's does; with no item, a lease whose request ended before it
-- reached the host (UNSENT: robots.txt forbade it, a cache answered it) and is done. The
-- lease never contacted the host, so the host is ready again when it was ready for this
-- lease (its ready time), or now; no rest is added, and its last fetch time stays.
local function hand_back(member, lv, ready, item)
  local host = member
  if MULTI then host = host_of(member) end
  if item == nil then
    stat('unsent', 1)  -- ended before it reached the host (UNSENT): its URL is done
  elseif is_retired(host) then
    if not count_refused(host) then redis.call('RPUSH', K_DROPPED, host .. '\0' .. item) end
    stat('handed_back', 1)
  else
    add_to_back(host, lv, item, true)
    stat('handed_back', 1)
  end
  redis.call('HDEL', K_LEASES, member)
  redis.call('ZREM', K_DEADLINES, member)
  local nc = math.max(now, ready or now)
  if tonumber(redis.call('HGET', K_ACTIVE, host) or '0') > 0 then
    redis.call('ZADD', K_READY, fmt(unblocked_at(host, nc)), member)
    if member ~= host then lease_ended(host, member) end
  else
    idle_or_deactivate(host, member, nc)
  end
  return nc
end

-- A lease past its deadline goes back to the head of its host's queue. The host then rests
-- LAPSE_REST, as after a fetch that ran the whole lease, and its fetch counts as lasting
-- until now; except when the lease lapsed before claim + LEASE_T: its worker stopped
-- renewing it (it died, and its connections with it), and the time the lapse took to
-- notice is not the server's. Then the host rests its own last pace if it has one (its
-- stored entry stays), else FIRST_PACE, with the fetch counted from the claim to one
-- heartbeat after the last renewal (live: the liveness window of the workers, as the
-- caller's; they beat every quarter of it); the rest counts from two beats after the last
-- renewal: the worker was dead by then, and a dead worker's connections are closed.
local function expire(limit, live)
  local due = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', fmt(now), 'WITHSCORES',
                         'LIMIT', 0, limit)
  local out = {}
  for i = 1, #due, 2 do
    local member, deadline = due[i], tonumber(due[i + 1])
    local host = member
    if MULTI then host = host_of(member) end
    local rec = redis.call('HGET', K_LEASES, member)
    local _, lv, handed, ready, item = parse_lease(rec)
    local fetch, ago, stored, pace = now - handed, 0, nil, LAPSE_REST
    if live > 0 and deadline < handed + LEASE_T - 0.001 then
      fetch = math.max(0, math.min(fetch, deadline - handed - 0.75 * live))
      ago = math.max(0, now - (deadline - 0.5 * live))
      stored, pace = redis.call('HGET', K_FETCH, host), FIRST_PACE
    end
    if stored then
      local _, own = paced(host, stored)
      fetch, pace = nil, own
    end
    if is_retired(host) then
      if not count_refused(host) then redis.call('RPUSH', K_DROPPED, host .. '\0' .. item) end
    else
      -- Back to the head of its level: it was next before, it is next again.
      add_to_back(host, lv, item, true)
    end
    release(member, fetch, pace, math.max(0, pace - ago), ready)
    stat('expired', 1)
    out[#out + 1] = host
    out[#out + 1] = item
  end
  return out
end

-- Give up a host: drop its back queue (returned), refuse its later URLs. budget: it
-- reached its fetch budget (counted apart).
local function retire_host(host, budget)
  if redis.call('SADD', K_RETIRED, host) == 0 then return {} end
  mark_filled(K_RETIRED)
  if budget then
    redis.call('SADD', K_CAPPED, host)
    stat('budget_hosts', 1)
  else
    stat('retired_hosts', 1)
  end
  local dropped = {}
  if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
    for lv = F, 1, -1 do
      local items = redis.call('LRANGE', bkey(lv, host), 0, -1)
      for _, item in ipairs(items) do dropped[#dropped + 1] = item end
      redis.call('DEL', bkey(lv, host))
    end
    redis.call('HSET', K_ACTIVE, host, 0)
    redis.call('HDEL', K_HEAD, host)
    count('back', -#dropped)
    redis.call('ZREM', K_READY, host)
    local k = conns_of(host)
    local leased
    if k > 1 then
      spare_idle(host, k)
      leased = leased_besides(host, k, nil)
    else
      leased = redis.call('HEXISTS', K_LEASES, host) == 1
    end
    if not leased then
      deactivate(host)
      fill_to_floor()
    end
  end
  if budget then stat('budget_items', #dropped) else stat('retired_items', #dropped) end
  return dropped
end

local function next_wakeup()
  local first = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) == math.huge then return false end
  return fmt(math.max(0, tonumber(first[2]) - now))
end

-- A lease's deadline: LEASE_T after the claim, or the claiming worker's liveness window
-- (0: none) if shorter; the worker's heartbeat renews it (renew.lua).
local function lease_deadline(live)
  if live > 0 and live < LEASE_T then return now + live end
  return now + LEASE_T
end

-- Before claims: rests that ended are forgotten, and hosts get back queues up to B.
local function prepare_claims()
  redis.call('ZREMRANGEBYSCORE', K_REST, '-inf', fmt(now))
  fill_to_floor()
end

-- The due host whose next URL is best (highest level, then least slack) gives it up under
-- a lease: {id, host, level, item, deadline, ready time}; nil if no host is due. ahead
-- (seconds): with no host due now, and no new host to activate, the host that is due first
-- within ahead is claimed ahead of its time; its worker holds the request until then.
local function claim_one(deadline, ahead)
  for _ = 1, BMAX + 1 do
    local due = redis.call('ZRANGEBYSCORE', K_READY, '-inf', fmt(now + (ahead or 0)),
                           'WITHSCORES', 'LIMIT', 0, WINDOW)
    local activated = false
    if (#due == 0 or tonumber(due[2]) > now)
        and redis.call('HLEN', K_ACTIVE) < BMAX and front_len() > 0 then
      -- A host activated now is ready now: before one claimed ahead.
      activated = activate_one()
    end
    if not activated then
      if #due == 0 then return nil end
      local best, best_lv, best_slack, best_te, best_m = nil, -1, 0, 0, nil
      local hosts, members = {}, {}
      for i = 1, #due, 2 do
        -- Hosts due later than now are candidates only when none is due now (the first).
        if i == 1 or tonumber(due[i + 1]) <= now then
          members[#members + 1] = due[i]
          hosts[#hosts + 1] = MULTI and host_of(due[i]) or due[i]
        end
      end
      local heads = redis.call('HMGET', K_HEAD, unpack(hosts))
      local paces = redis.call('HMGET', K_FETCH, unpack(hosts))
      local queued = redis.call('HMGET', K_ACTIVE, unpack(hosts))
      for j, host in ipairs(hosts) do
        local t_e = tonumber(due[2 * j])
        local lv = tonumber(heads[j])
        if lv >= best_lv then  -- (a lower level never wins: its slack is not read)
          local slack = -math.huge
          if paces[j] then
            local fetch, pace = paced(host, paces[j])
            slack = t_e - tonumber(queued[j]) * (fetch + pace)
          end
          if lv > best_lv or slack < best_slack then
            best, best_lv, best_slack, best_te, best_m = host, lv, slack, t_e, members[j]
          end
        end
      end
      local item = redis.call('LPOP', bkey(best_lv, best))
      if redis.call('LLEN', bkey(best_lv, best)) == 0 then update_head(best, best_lv - 1) end
      local left = redis.call('HINCRBY', K_ACTIVE, best, -1)
      count('back', -1)
      redis.call('ZREM', K_READY, best_m)
      local id = redis.call('INCR', K_SEQ)
      redis.call('HSET', K_LEASES, best_m,
                 id .. '|' .. best_lv .. '|' .. fmt(now) .. '|' .. fmt(best_te) .. '|' .. item)
      redis.call('ZADD', K_DEADLINES, fmt(deadline), best_m)
      if left == 0 and best_m ~= best then spare_idle(best, conns_of(best)) end
      stat('popped', 1)
      return {id, best, best_lv, item, fmt(deadline), fmt(best_te)}
    end
  end
  return nil
end

-- The end of a fetch under lease id of host: {1, nc, capped} (nc: the host's next contact;
-- capped: URLs dropped as this fetch spent the host's budget, -1 if it did not), or {0}
-- if the lease is no longer held (it lapsed and was taken back). pace: the policy's rest
-- for this fetch (kept with it, see paced); rest: as the client's core.politeness
-- computed it (see release). given: the host's budget from the worker's settings (0:
-- unlimited; -1: handed back unfetched, not counted; -2: given back unfetched with its
-- item queued again, see hand_back); the shared budgets hash (scrapy frontier budget)
-- overrides it. The fetch count is every worker's: counted and tested in one step, two
-- workers cannot both pass a budget's last fetch.
local function complete_one(host, id, fetch, pace, rest, given)
  local member, rec = host, redis.call('HGET', K_LEASES, host)
  if MULTI and not (rec and string.match(rec, '^(%d+)|') == id) then
    member, rec = find_lease(host, id)  -- a lease on one of the host's connections
  end
  if not rec then return {0} end
  local lid, lv, _, ready, item = parse_lease(rec)
  if lid ~= id then return {0} end
  if given == -2 then return {1, hand_back(member, lv, ready, item), -1} end
  if given == -3 then return {1, hand_back(member, lv, ready, nil), -1} end
  local nc = release(member, fetch, pace, rest, ready)
  stat('completed', 1)
  local shared = filled(K_BUDGETS, 'HLEN')
  local budget = math.max(given, 0)
  if shared then budget = tonumber(redis.call('HGET', K_BUDGETS, host) or budget) end
  local capped = -1
  if given >= 0 and (budget > 0 or shared) then
    local n = redis.call('HINCRBY', K_FETCHED, host, 1)
    if budget > 0 and n >= budget and not is_retired(host) then
      capped = #retire_host(host, true)
    end
  end
  return {1, nc, capped}
end

-- Queue item for host at level lv, tested against and added to a seen set in the same
-- step. mode 0: no seen set; 1: add member to seen_key once queued; 2: also drop the entry
-- if the member is there already (two workers pushing one URL at once cannot both queue
-- it). k: the host's connections, kept for when it gets a back queue (K_CONNS); ending 1:
-- one of the host's leases ends in this round (see lease_ended). Returns 1 queued, 0
-- refused (retired host), 2 duplicate.
local function push_one(host, lv, item, seen_key, member, mode, k, ending)
  -- Test and mark in one command; a refused push takes its mark back.
  if mode == 2 and redis.call('SADD', seen_key, member) == 0 then return 2 end
  if is_retired(host) then
    if mode == 2 then redis.call('SREM', seen_key, member) end
    count_refused(host)
    return 0
  end
  stat('pushed', 1)
  if redis.call('HEXISTS', K_ACTIVE, host) == 1 then
    add_to_back(host, lv, item, false, nil, ending ~= 1)
  else
    if k > 1 then
      redis.call('HSET', K_CONNS, host, k)
      MULTI = true
    elseif MULTI then
      redis.call('HDEL', K_CONNS, host)
    end
    local len = front_queue_len(lv)  -- before the push: a first read would count it
    redis.call('RPUSH', fkey(lv), host .. '\0' .. item)
    FLEN[lv] = len + 1
    count('front', 1)
    fill_to_floor()
  end
  if mode == 1 then redis.call('SADD', seen_key, member) end
  return 1
end
