-- KEYS: the job hash, its history list, leased, ready, seq, dlq. ARGV: prefix, id, token, error
-- JSON (the `released` entry), free releases, max_attempts, now. Puts a leased job back: its
-- first `free` releases do not count the attempt; past them the attempt counts, joins the
-- history, and on the last allowed attempt the job is dead-lettered.
-- Reply: 'free' · 'counted' · 'dead' · '' when the token does not hold the lease.
local k, hist, leased, ready, seq, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, token, errjson = ARGV[2], ARGV[3], ARGV[4]
local free, maxatt, now = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local h = redis.call('HMGET', k, 'state', 'token', 'attempt', 'worker', 'leased_at', 'releases')
if h[1] ~= 'leased' or h[2] ~= token then return '' end
redis.call('ZREM', leased, id)
redis.call('HDEL', k, 'token', 'fence', 'expires_at')
if (tonumber(h[6]) or 0) < free then
  redis.call('HINCRBY', k, 'releases', 1)
  redis.call('HINCRBY', k, 'attempt', -1)
  make_ready(id, k, seq, ready)
  return 'free'
end
push_history(hist, cjson.encode({attempt = tonumber(h[3]), worker = h[4],
  leased_at = tonumber(h[5]), ended_at = now, error = cjson.decode(errjson)}))
if tonumber(h[3]) >= maxatt then
  redis.call('HSET', k, 'state', 'dead', 'error', errjson, 'dead_at', f(now))
  redis.call('ZADD', dlq, f(now), id)
  return 'dead'
end
make_ready(id, k, seq, ready)
return 'counted'
