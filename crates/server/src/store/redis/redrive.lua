local id = ARGV[2]
local k = p..':job:'..id
if redis.call('HGET', k, 'state') ~= 'dead' then return 0 end
redis.call('ZREM', p..':dlq', id)
redis.call('HSET', k, 'attempt', 0)
redis.call('HDEL', k, 'error', 'dead_at')
make_ready(id, k)
return 1
