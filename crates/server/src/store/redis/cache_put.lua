-- KEYS: the cache entry, the key's lock, cachelen, cachesz, cachebytes.
-- ARGV: prefix, key, model_id, vector, fence, expires_at, now, px, by_lock ('1': the fence must
-- be a live lock's on this key), by (the writer's provenance JSON, '' for none), bytes (what the
-- entry counts against the cache-bytes quota: kept in P:cachelen, summed in P:cachebytes, its
-- expiry in P:cachesz for the sweep that takes it off the sum).
local k, lock, lens, sizes, bytes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local fence, exp, now, px = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8]
if ARGV[9] == '1' then
  local l = redis.call('HMGET', lock, 'fence', 'expires_at')
  if not l[1] or tonumber(l[2]) <= now or tonumber(l[1]) ~= fence then return {'u'} end
end
local cur = redis.call('HMGET', k, 'model_id', 'vector', 'fence', 'expires_at', 'by')
local live = cur[3] and tonumber(cur[4]) > now
if live and tonumber(cur[3]) > fence then
  return {'0', cur[1], cur[2], cur[3], cur[4], cur[5] or ''}
end
redis.call('HSET', k, 'model_id', ARGV[3], 'vector', ARGV[4], 'fence', ARGV[5], 'expires_at', exp)
if ARGV[10] ~= '' then redis.call('HSET', k, 'by', ARGV[10]) else redis.call('HDEL', k, 'by') end
redis.call('PEXPIRE', k, px)
local size = tonumber(ARGV[11])
local old = tonumber(redis.call('HGET', lens, ARGV[2]) or '0')
redis.call('HSET', lens, ARGV[2], ARGV[11])
redis.call('ZADD', sizes, exp, ARGV[2])
redis.call('INCRBY', bytes, f(size - old))
if live then return {'1', '1'} end
return {'1', '0'}
