local k = p..':lock:'..ARGV[2]
local token, now, ttl, px = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local exp = redis.call('HGET', k, 'expires_at')
if exp and tonumber(exp) > now then return {'0', exp} end
local fence = redis.call('INCR', p..':fence')
redis.call('HSET', k, 'token', token, 'fence', fence, 'expires_at', f(now + ttl))
redis.call('PEXPIRE', k, px)
return {'1', tostring(fence), f(now + ttl)}
