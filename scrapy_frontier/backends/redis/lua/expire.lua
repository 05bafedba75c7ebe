-- expire: see RedisFrontier.expire_leases().
return expire(tonumber(ARGV[11]), 0)
