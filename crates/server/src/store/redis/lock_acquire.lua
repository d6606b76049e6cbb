-- KEYS: the lock hash, fence. ARGV: prefix, key, token, now, ttl_ms, px (Redis' own expiry).
-- Reply: {'1', fence, expires_at} granted · {'0', expires_at} held by another.
local k, fencek = KEYS[1], KEYS[2]
local token, now, ttl, px = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local exp = redis.call('HGET', k, 'expires_at')
if exp and tonumber(exp) > now then return {'0', exp} end
local fence = draw_fences(fencek, 1, now * 1000) + 1
redis.call('HSET', k, 'token', token, 'fence', f(fence), 'expires_at', f(now + ttl))
redis.call('PEXPIRE', k, px)
return {'1', f(fence), f(now + ttl)}
