-- wakeup: see RedisFrontier.next_wakeup().
return {fmt(now), next_wakeup()}
