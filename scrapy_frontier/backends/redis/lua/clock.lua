-- The clock of the node that holds KEYS[1] (the frontier's meta key): RedisFrontier.server_time().
return redis.call('TIME')
