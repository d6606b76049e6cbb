-- KEYS: the job hash, leased, ready, seq. ARGV: prefix, id, token. Puts a leased job back, its
-- attempt not counted. Reply: 1 released · 0 the token does not hold the lease.
local k, leased, ready, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token = ARGV[2], ARGV[3]
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] ~= 'leased' or h[2] ~= token then return 0 end
redis.call('ZREM', leased, id)
redis.call('HDEL', k, 'token', 'fence', 'expires_at')
redis.call('HINCRBY', k, 'attempt', -1)
make_ready(id, k, seq, ready)
return 1
