-- KEYS: the standing hash of `sub`, quarantined. ARGV: prefix, sub, at, reason. Quarantines `sub`
-- unless it already is (the first reason is kept), in one step: its standing hash and the
-- quarantined set. Returns 1 when newly done.
local k, quarantined = KEYS[1], KEYS[2]
local sub = ARGV[2]
if redis.call('HSETNX', k, 'q_at', ARGV[3]) == 0 then return 0 end
redis.call('HSET', k, 'q_reason', ARGV[4])
redis.call('ZADD', quarantined, ARGV[3], sub)
return 1
