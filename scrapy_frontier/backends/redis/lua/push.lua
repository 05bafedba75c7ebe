-- push: see RedisFrontier.push_many() and push_one.
-- ARGV from 11 on, seven per entry: host, level, item, seen-set key, member, mode,
-- connections.
local out = {}
for i = 11, #ARGV, 7 do
  out[#out + 1] = push_one(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
                           ARGV[i + 4], tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]))
end
return out
