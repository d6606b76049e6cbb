local now = tonumber(ARGV[2])
local out = {}
local i = 3
while i <= #ARGV do
  local id = ARGV[i]
  local k = p..':job:'..id
  if redis.call('EXISTS', k) == 1 then
    out[#out+1] = '0'
  else
    local at = tonumber(ARGV[i+4])
    redis.call('HSET', k, 'text', ARGV[i+1], 'model_id', ARGV[i+2], 'priority', ARGV[i+3],
      'meta', ARGV[i+5], 'trace', ARGV[i+6], 'attempt', 0, 'available_at', ARGV[i+4])
    if at > now then
      redis.call('HSET', k, 'state', 'delayed')
      redis.call('ZADD', p..':delayed', f(at), id)
    else
      make_ready(id, k)
    end
    out[#out+1] = '1'
  end
  i = i + 7
end
return out
