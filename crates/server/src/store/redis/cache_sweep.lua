-- KEYS: cachesz, cachelen, cachebytes (the entries' own keys are named from the prefix: see
-- head.lua). ARGV: prefix, now, limit. Takes up to `limit` cache entries past their expiry off the
-- cache-bytes sum (Redis deletes the entries themselves with their TTL). An entry rewritten
-- with a later expiry is rescored instead. Returns how many were taken off.
local sizes, lens, bytes = KEYS[1], KEYS[2], KEYS[3]
local now, n = tonumber(ARGV[2]), 0
local keys = redis.call('ZRANGEBYSCORE', sizes, '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, key in ipairs(keys) do
  local e = tonumber(redis.call('HGET', p..':cache:'..key, 'expires_at') or '0')
  if e > now then
    redis.call('ZADD', sizes, e, key)
  else
    local old = redis.call('HGET', lens, key)
    if old then redis.call('INCRBY', bytes, -tonumber(old)) end
    redis.call('HDEL', lens, key)
    redis.call('ZREM', sizes, key)
    n = n + 1
  end
end
return n
