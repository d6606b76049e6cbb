local id, token = ARGV[2], ARGV[3]
local k = p..':job:'..id
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] ~= 'leased' or h[2] ~= token then return 0 end
redis.call('ZREM', p..':leased', id)
redis.call('HDEL', k, 'token', 'fence', 'expires_at')
redis.call('HINCRBY', k, 'attempt', -1)
make_ready(id, k)
return 1
