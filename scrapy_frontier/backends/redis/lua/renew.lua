-- renew: see RedisFrontier.renew(). A worker's heartbeat: it is alive for ARGV[12] more
-- seconds (the workers zset), and so are its leases, given as host, lease id pairs from
-- ARGV[13]; a lease is never renewed past its claim + LEASE_T. A pair whose host is no
-- longer leased under that id (taken back, or completed meanwhile) is left alone.
-- Returns one flag per pair: 1 renewed, 0 no longer held.
local worker, live = ARGV[11], tonumber(ARGV[12])
local K_WORKERS = P .. 'workers'
redis.call('ZADD', K_WORKERS, fmt(now + live), worker)
-- Workers silent for an hour are forgotten (a closing worker removes itself).
redis.call('ZREMRANGEBYSCORE', K_WORKERS, '-inf', fmt(now - 3600))
if #ARGV < 14 then return {} end
local hosts = {}
for i = 13, #ARGV, 2 do hosts[#hosts + 1] = ARGV[i] end
local recs = redis.call('HMGET', K_LEASES, unpack(hosts))
local renewals = {}
local held = {}
for j, host in ipairs(hosts) do
  local rec, member, want = recs[j], host, ARGV[12 + 2 * j]
  if MULTI and not (rec and string.match(rec, '^(%d+)|') == want) then
    member, rec = find_lease(host, want)  -- a lease on one of the host's connections
  end
  held[j] = 0
  if rec then
    local id, _, handed = parse_lease(rec)
    if id == want then
      renewals[#renewals + 1] = fmt(math.min(handed + LEASE_T, now + live))
      renewals[#renewals + 1] = member
      held[j] = 1
    end
  end
end
if #renewals > 0 then redis.call('ZADD', K_DEADLINES, 'XX', unpack(renewals)) end
return held
