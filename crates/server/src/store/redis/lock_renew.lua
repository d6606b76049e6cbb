-- KEYS: the lock hash. ARGV: prefix, key, token, now, ttl_ms, px.
-- Reply: {fence, expires_at} renewed · {} not held by `token` (or expired).
local k = KEYS[1]
local token, now, ttl, px = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local h = redis.call('HMGET', k, 'token', 'fence', 'expires_at')
if h[1] ~= token or tonumber(h[3]) <= now then return {} end
redis.call('HSET', k, 'expires_at', f(now + ttl))
redis.call('PEXPIRE', k, px)
return {h[2], f(now + ttl)}
