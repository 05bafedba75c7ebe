-- retire: see RedisFrontier.retire().
return retire_host(ARGV[13], false)
