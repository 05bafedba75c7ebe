-- push: see RedisFrontier.push_many() and push_one.
-- ARGV from 11 on, eight per entry: host, level, item, seen-set key, member, mode,
-- connections, 1 if one of the host's leases ends in the same round.
local out = {}
for i = 11, #ARGV, 8 do
  out[#out + 1] = push_one(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
                           ARGV[i + 4], tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]),
                           tonumber(ARGV[i + 7]))
end
return out
