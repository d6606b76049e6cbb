-- Many heartbeats in one script (one round trip). KEYS: leased, then the job hash of each lease.
-- ARGV: prefix, now, lease_ms, hold_ms, then (id, token) pairs. Returns, per lease, the same
-- reply as heartbeat.lua flattened as `n` then its fields:
-- {'2', fence, expires_at} when extended · {'0'} when the token does not hold the lease or its
-- hold is used up.
local leased = KEYS[1]
local now, lease_ms, hold_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
local j = 1
for i = 5, #ARGV, 2 do
  j = j + 1
  local id, token = ARGV[i], ARGV[i + 1]
  local k = KEYS[j]
  local h = redis.call('HMGET', k, 'state', 'token', 'fence', 'leased_at')
  local cap = (tonumber(h[4]) or now) + hold_ms
  if h[1] == 'leased' and h[2] == token and cap > now then
    local exp = f(math.min(now + lease_ms, cap))
    redis.call('HSET', k, 'expires_at', exp)
    redis.call('ZADD', leased, exp, id)
    out[#out + 1] = '2'; out[#out + 1] = h[3]; out[#out + 1] = exp
  else
    out[#out + 1] = '0'
  end
end
return out
