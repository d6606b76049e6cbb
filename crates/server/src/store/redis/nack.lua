local id, token = ARGV[2], ARGV[3]
local errjson, retryable, retry_at = ARGV[4], ARGV[5], tonumber(ARGV[6])
local maxatt, now = tonumber(ARGV[7]), tonumber(ARGV[8])
local k = p..':job:'..id
local h = redis.call('HMGET', k, 'state', 'token', 'attempt', 'worker', 'leased_at')
if h[1] ~= 'leased' or h[2] ~= token then return {} end
redis.call('ZREM', p..':leased', id)
redis.call('HDEL', k, 'token', 'fence', 'expires_at')
push_history(id, cjson.encode({attempt = tonumber(h[3]), worker = h[4],
  leased_at = tonumber(h[5]), ended_at = now, error = cjson.decode(errjson)}))
if retryable == '0' or tonumber(h[3]) >= maxatt then
  redis.call('HSET', k, 'state', 'dead', 'error', errjson, 'dead_at', f(now))
  redis.call('ZADD', p..':dlq', f(now), id)
  return {'dead'}
end
redis.call('HSET', k, 'state', 'delayed', 'available_at', f(retry_at))
redis.call('ZADD', p..':delayed', f(retry_at), id)
return {'retry', f(retry_at)}
