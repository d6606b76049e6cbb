local id, token = ARGV[2], ARGV[3]
local k = p..':job:'..id
local h = redis.call('HMGET', k, 'state', 'token', 'fence')
if h[1] ~= 'leased' or h[2] ~= token then return {} end
local exp = tonumber(ARGV[4]) + tonumber(ARGV[5])
redis.call('HSET', k, 'expires_at', f(exp))
redis.call('ZADD', p..':leased', f(exp), id)
return {h[3], f(exp)}
