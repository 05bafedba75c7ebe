-- retire: see RedisFrontier.retire().
return retire_host(ARGV[11], false)
