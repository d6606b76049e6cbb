-- ARGV: prefix, sub, at, reason. Quarantines `sub` unless it already is (the first reason is
-- kept), in one step: its standing hash and the quarantined set. Returns 1 when newly done.
local sub = ARGV[2]
local k = p..':standing:'..sub
if redis.call('HSETNX', k, 'q_at', ARGV[3]) == 0 then return 0 end
redis.call('HSET', k, 'q_reason', ARGV[4])
redis.call('ZADD', p..':quarantined', ARGV[3], sub)
return 1
