-- KEYS: ready, delayed, seq, then one job hash per job. ARGV: prefix, now, then per job
-- (id, text, model_id, priority, available_at, meta, trace). Reply: per job '1' new · '0' known.
-- Three commands per new job (EXISTS, one HSET, its share of one ZADD per set): the ready
-- numbers are drawn from `seq` once for the batch, as make_ready would draw them one by one.
local ready, delayed, seqk = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[2])
local out = {}
local seq = tonumber(redis.call('GET', seqk)) or 0
local first = seq
local to_ready, to_delay = {}, {}
local j = 0
for i = 3, #ARGV, 7 do
  j = j + 1
  local id = ARGV[i]
  local k = KEYS[3 + j]
  if redis.call('EXISTS', k) == 1 then
    out[#out+1] = '0'
  else
    local at = tonumber(ARGV[i+4])
    if at > now then
      redis.call('HSET', k, 'text', ARGV[i+1], 'model_id', ARGV[i+2], 'priority', ARGV[i+3],
        'meta', ARGV[i+5], 'trace', ARGV[i+6], 'attempt', '0', 'available_at', ARGV[i+4],
        'state', 'delayed')
      to_delay[#to_delay+1] = f(at)
      to_delay[#to_delay+1] = id
    else
      seq = seq + 1
      local pri = tonumber(ARGV[i+3]) or 0
      redis.call('HSET', k, 'text', ARGV[i+1], 'model_id', ARGV[i+2], 'priority', ARGV[i+3],
        'meta', ARGV[i+5], 'trace', ARGV[i+6], 'attempt', '0', 'available_at', ARGV[i+4],
        'state', 'ready', 'seq', f(seq))
      to_ready[#to_ready+1] = f(-pri * 1099511627776 + seq % 1099511627776)
      to_ready[#to_ready+1] = id
    end
    out[#out+1] = '1'
  end
end
if seq > first then
  redis.call('SET', seqk, f(seq))
end
zadd_all(ready, to_ready)
zadd_all(delayed, to_delay)
return out
