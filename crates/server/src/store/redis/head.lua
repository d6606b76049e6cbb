-- Prepended to every script. ARGV[1] is the key prefix; max_history is set from Rust's
-- MAX_HISTORY on the line before this file.
local p = ARGV[1]
local function push_history(id, entry)
  local hk = p..':hist:'..id
  redis.call('RPUSH', hk, entry)
  redis.call('LTRIM', hk, -max_history, -1)
end
local function f(x) return string.format('%.0f', x) end
local function make_ready(id, k)
  local seq = redis.call('INCR', p..':seq')
  local pri = tonumber(redis.call('HGET', k, 'priority')) or 0
  redis.call('HSET', k, 'state', 'ready', 'seq', seq)
  redis.call('ZADD', p..':ready', f(-pri * 1099511627776 + seq % 1099511627776), id)
end
