-- KEYS: ready, delayed, seq, then one job hash per job. ARGV: prefix, now, then per job
-- (id, text, model_id, priority, available_at, meta, trace). Reply: per job '1' new · '0' known.
local ready, delayed, seq = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[2])
local out = {}
local j = 0
for i = 3, #ARGV, 7 do
  j = j + 1
  local id = ARGV[i]
  local k = KEYS[3 + j]
  if redis.call('EXISTS', k) == 1 then
    out[#out+1] = '0'
  else
    local at = tonumber(ARGV[i+4])
    redis.call('HSET', k, 'text', ARGV[i+1], 'model_id', ARGV[i+2], 'priority', ARGV[i+3],
      'meta', ARGV[i+5], 'trace', ARGV[i+6], 'attempt', 0, 'available_at', ARGV[i+4])
    if at > now then
      redis.call('HSET', k, 'state', 'delayed')
      redis.call('ZADD', delayed, f(at), id)
    else
      make_ready(id, k, seq, ready)
    end
    out[#out+1] = '1'
  end
end
return out
