-- ARGV: prefix, key. Deletes a cache entry and takes it off the cache-bytes sum.
local n = redis.call('DEL', p..':cache:'..ARGV[2])
local old = redis.call('HGET', p..':cachelen', ARGV[2])
if old then
  redis.call('INCRBY', p..':cachebytes', -tonumber(old))
  redis.call('HDEL', p..':cachelen', ARGV[2])
  redis.call('ZREM', p..':cachesz', ARGV[2])
end
return n
