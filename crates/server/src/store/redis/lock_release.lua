-- KEYS: the lock hash. ARGV: prefix, key, token. Reply: 1 released · 0 not held by `token`.
local k = KEYS[1]
if redis.call('HGET', k, 'token') == ARGV[3] then
  redis.call('DEL', k)
  return 1
end
return 0
