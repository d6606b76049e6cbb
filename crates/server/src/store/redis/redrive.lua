-- KEYS: the job hash, dlq, ready, seq. ARGV: prefix, id. Reply: 1 redriven · 0 not dead.
local k, dlq, ready, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[2]
if redis.call('HGET', k, 'state') ~= 'dead' then return 0 end
redis.call('ZREM', dlq, id)
redis.call('HSET', k, 'attempt', 0, 'releases', 0)
redis.call('HDEL', k, 'error', 'dead_at')
make_ready(id, k, seq, ready)
return 1
