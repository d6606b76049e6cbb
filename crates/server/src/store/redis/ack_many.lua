-- Many acks in one script (one round trip, atomic). KEYS: leased, finished, finseq (see ack.lua),
-- then (job hash, history list) per ack. ARGV: prefix, retention ('' = keep), then (id, token,
-- result JSON, result model id) quadruples. Returns, per ack, the same reply as ack.lua, flattened as `n` followed by the
-- reply's fields: {'1', fence, text} · {'2'} · {'0'} · {'-1'} · {'m', model}.
local leased, finished_k, finseq = KEYS[1], KEYS[2], KEYS[3]
local retention = ARGV[2]
local out = {}
local finished = {}
local j = 2
for i = 3, #ARGV, 4 do
  j = j + 2
  local id, token, result, model = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local k, hist = KEYS[j], KEYS[j + 1]
  local h = redis.call('HMGET', k, 'state', 'token', 'done_token', 'fence', 'text', 'model_id')
  if not h[1] then
    out[#out + 1] = '1'; out[#out + 1] = '-1'
  elseif h[1] == 'leased' and h[2] == token and h[6] and h[6] ~= '' and h[6] ~= model then
    out[#out + 1] = '2'; out[#out + 1] = 'm'; out[#out + 1] = h[6]
  elseif h[1] == 'leased' and h[2] == token then
    redis.call('HSET', k, 'state', 'done', 'result', result, 'done_token', token)
    redis.call('HDEL', k, 'token', 'expires_at', 'fence')
    finished[#finished + 1] = id
    if retention ~= '' then
      redis.call('PEXPIRE', k, retention)
      redis.call('PEXPIRE', hist, retention)
    end
    out[#out + 1] = '3'; out[#out + 1] = '1'; out[#out + 1] = h[4] or '0'; out[#out + 1] = h[5] or ''
  elseif h[1] == 'done' and h[3] == token then
    out[#out + 1] = '1'; out[#out + 1] = '2'
  else
    out[#out + 1] = '1'; out[#out + 1] = '0'
  end
end
if #finished > 0 then
  redis.call('ZREM', leased, unpack(finished))
  -- Scored by the order they finished: each insert lands at the set's end, where score-0
  -- members ordered by id cost a walk comparing ids byte by byte (~2 µs of Redis per job).
  local n = #finished
  local base = redis.call('INCRBY', finseq, n) - n
  local scored = {}
  for i, id in ipairs(finished) do scored[#scored + 1] = f(base + i); scored[#scored + 1] = id end
  redis.call('ZADD', finished_k, unpack(scored))
end
return out
