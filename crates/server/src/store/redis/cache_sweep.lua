-- ARGV: prefix, now, limit. Takes up to `limit` cache entries past their expiry off the
-- cache-bytes sum (Redis deletes the entries themselves with their TTL). An entry rewritten
-- with a later expiry is rescored instead. Returns how many were taken off.
local now, n = tonumber(ARGV[2]), 0
local keys = redis.call('ZRANGEBYSCORE', p..':cachesz', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, key in ipairs(keys) do
  local e = tonumber(redis.call('HGET', p..':cache:'..key, 'expires_at') or '0')
  if e > now then
    redis.call('ZADD', p..':cachesz', e, key)
  else
    local old = redis.call('HGET', p..':cachelen', key)
    if old then redis.call('INCRBY', p..':cachebytes', -tonumber(old)) end
    redis.call('HDEL', p..':cachelen', key)
    redis.call('ZREM', p..':cachesz', key)
    n = n + 1
  end
end
return n
