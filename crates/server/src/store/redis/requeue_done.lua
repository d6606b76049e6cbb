-- ARGV: prefix, then job ids. Puts each finished job back in the queue (its result dropped,
-- its retention expiry removed); returns the ids that were done.
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = p..':job:'..id
  if redis.call('HGET', k, 'state') == 'done' then
    redis.call('HDEL', k, 'result', 'done_token')
    redis.call('PERSIST', k)
    redis.call('PERSIST', p..':hist:'..id)
    make_ready(id, k)
    out[#out + 1] = id
  end
end
return out
