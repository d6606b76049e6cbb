-- KEYS: the job hash, its history list, leased, ready, seq, dlq. ARGV: prefix, id, token, error
-- JSON (the `released` entry), free releases, max_attempts, now. Puts a leased job back: its
-- first `free` releases do not count the attempt; past them the attempt counts, joins the
-- history, and on the last allowed attempt the job is dead-lettered.
-- Reply: 'free' · 'counted' · 'dead' · '' when the token does not hold the lease.
local k, hist, leased, ready, seq, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, token, errjson = ARGV[2], ARGV[3], ARGV[4]
local free, maxatt, now = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local h = redis.call('HMGET', k, 'state', 'token', 'releases')
if h[1] ~= 'leased' or h[2] ~= token then return '' end
redis.call('ZREM', leased, id)
if (tonumber(h[3]) or 0) < free then
  redis.call('HDEL', k, 'token', 'fence', 'expires_at')
  redis.call('HINCRBY', k, 'releases', 1)
  redis.call('HINCRBY', k, 'attempt', -1)
  make_ready(id, k, seq, ready)
  return 'free'
end
if end_delivery(id, k, hist, errjson, maxatt, now, seq, ready, dlq) then return 'dead' end
return 'counted'
