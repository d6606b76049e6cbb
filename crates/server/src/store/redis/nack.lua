-- KEYS: the job hash, its history list, leased, dlq, delayed. ARGV: prefix, id, token, error
-- JSON, retryable ('1'/'0'), retry_at, max_attempts, now.
-- Reply: {'dead'} · {'retry', available_at} · {} when the token does not hold the lease.
local k, hist, leased, dlq, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, token = ARGV[2], ARGV[3]
local errjson, retryable, retry_at = ARGV[4], ARGV[5], tonumber(ARGV[6])
local maxatt, now = tonumber(ARGV[7]), tonumber(ARGV[8])
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] ~= 'leased' or h[2] ~= token then return {} end
redis.call('ZREM', leased, id)
redis.call('HDEL', k, 'token', 'fence', 'expires_at')
local attempt = push_attempt(k, hist, errjson, now)
if retryable == '0' or attempt >= maxatt then
  redis.call('HSET', k, 'state', 'dead', 'error', errjson, 'dead_at', f(now))
  redis.call('ZADD', dlq, f(now), id)
  return {'dead'}
end
redis.call('HSET', k, 'state', 'delayed', 'available_at', f(retry_at))
redis.call('ZADD', delayed, f(retry_at), id)
return {'retry', f(retry_at)}
