-- push: see RedisFrontier.push_many() and push_one.
-- ARGV from 11 on, six per entry: host, level, item, seen-set key, member, mode.
local out = {}
for i = 11, #ARGV, 6 do
  out[#out + 1] = push_one(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
                           ARGV[i + 4], tonumber(ARGV[i + 5]))
end
return out
