-- KEYS: the job hash, leased. ARGV: prefix, id, token, now, lease_ms.
-- Reply: {fence, expires_at} when extended · {} when the token does not hold the lease.
local k, leased = KEYS[1], KEYS[2]
local id, token = ARGV[2], ARGV[3]
local h = redis.call('HMGET', k, 'state', 'token', 'fence')
if h[1] ~= 'leased' or h[2] ~= token then return {} end
local exp = tonumber(ARGV[4]) + tonumber(ARGV[5])
redis.call('HSET', k, 'expires_at', f(exp))
redis.call('ZADD', leased, f(exp), id)
return {h[3], f(exp)}
