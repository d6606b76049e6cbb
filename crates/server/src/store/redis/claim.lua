-- KEYS: ready, delayed, leased, dlq, seq, fence. ARGV: prefix, now, max, lease_ms, max_attempts,
-- worker, sub (who claims; '' for nobody known), then `max` lease tokens. The job and history keys of the ids found in the sorted sets
-- are named from the prefix (see head.lua).
local ready, delayed, leased_k, dlq, seqk, fencek = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local maxatt = tonumber(ARGV[5])
local worker = ARGV[6]
local sub = ARGV[7]
for _, id in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', f(now), 'LIMIT', 0, 1000)) do
  redis.call('ZREM', delayed, id)
  make_ready(id, p..':job:'..id, seqk, ready)
end
local dead, expired = {}, {}
local expired_err = cjson.encode({code = 'lease_expired',
  message = 'the lease expired before an ack or nack', retryable = true})
for _, id in ipairs(redis.call('ZRANGEBYSCORE', leased_k, '-inf', f(now), 'LIMIT', 0, 1000)) do
  redis.call('ZREM', leased_k, id)
  if end_delivery(id, p..':job:'..id, p..':hist:'..id, expired_err, maxatt, now, seqk, ready, dlq) then
    dead[#dead+1] = id
  else
    expired[#expired+1] = id
  end
end
local out = {tostring(#dead), tostring(#expired)}
for _, id in ipairs(dead) do out[#out+1] = id end
for _, id in ipairs(expired) do out[#out+1] = id end
if max > 0 then
  local popped = redis.call('ZPOPMIN', ready, max)
  -- one draw for the fences of the whole batch: base + 1 .. base + n, in claim order
  local n = #popped / 2
  local base = n > 0 and draw_fences(fencek, n, now * 1000) or 0
  local exp = f(now + lease)
  local now_s = f(now)
  local leased = {}
  for i = 1, #popped, 2 do
    local id = popped[i]
    local k = p..':job:'..id
    local fence = f(base + (i + 1) / 2)
    local h = redis.call('HMGET', k, 'text', 'model_id', 'trace', 'meta', 'attempt')
    local attempt = f((tonumber(h[5]) or 0) + 1)
    local token = ARGV[7 + (i + 1) / 2]
    redis.call('HSET', k, 'state', 'leased', 'attempt', attempt, 'token', token, 'fence', fence,
      'expires_at', exp, 'worker', worker, 'leased_at', now_s)
    if sub == '' then redis.call('HDEL', k, 'sub') else redis.call('HSET', k, 'sub', sub) end
    leased[#leased + 1] = exp
    leased[#leased + 1] = id
    out[#out+1] = id
    out[#out+1] = h[1] or ''
    out[#out+1] = h[2] or ''
    out[#out+1] = attempt
    out[#out+1] = h[3] or ''
    out[#out+1] = token
    out[#out+1] = fence
    out[#out+1] = exp
    out[#out+1] = h[4] or ''
  end
  if #leased > 0 then
    redis.call('ZADD', leased_k, unpack(leased))
  end
end
return out
