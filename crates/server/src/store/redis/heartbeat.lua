-- KEYS: the job hash, leased. ARGV: prefix, id, token, now, lease_ms, hold_ms.
-- Extends the lease to now + lease_ms, never past hold_ms after the delivery began (leased_at).
-- Reply: {fence, expires_at} when extended · {} when the token does not hold the lease or its
-- hold is used up.
local k, leased = KEYS[1], KEYS[2]
local id, token = ARGV[2], ARGV[3]
local now = tonumber(ARGV[4])
local h = redis.call('HMGET', k, 'state', 'token', 'fence', 'leased_at')
if h[1] ~= 'leased' or h[2] ~= token then return {} end
local cap = (tonumber(h[4]) or now) + tonumber(ARGV[6])
if cap <= now then return {} end
local exp = math.min(now + tonumber(ARGV[5]), cap)
redis.call('HSET', k, 'expires_at', f(exp))
redis.call('ZADD', leased, f(exp), id)
return {h[3], f(exp)}
