-- KEYS: the cache entry, cachelen, cachesz, cachebytes. ARGV: prefix, key. Deletes a cache entry
-- and takes it off the cache-bytes sum.
local entry, lens, sizes, bytes = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n = redis.call('DEL', entry)
local old = redis.call('HGET', lens, ARGV[2])
if old then
  redis.call('INCRBY', bytes, -tonumber(old))
  redis.call('HDEL', lens, ARGV[2])
  redis.call('ZREM', sizes, ARGV[2])
end
return n
