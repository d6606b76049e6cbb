-- KEYS: ready, seq, done (the old index of finished ids, every score 0), finished (the index
-- scored by finishing order), then (job hash, history list) per id. ARGV: prefix, then job ids.
-- Puts each finished job back in the queue (its result dropped, its retention expiry removed);
-- returns the ids that were done.
local ready, seq, done, finished = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local out = {}
local j = 3
for i = 2, #ARGV do
  j = j + 2
  local id = ARGV[i]
  local k, hist = KEYS[j], KEYS[j + 1]
  if redis.call('HGET', k, 'state') == 'done' then
    redis.call('HDEL', k, 'result', 'done_token')
    redis.call('PERSIST', k)
    redis.call('PERSIST', hist)
    redis.call('ZREM', done, id)
    redis.call('ZREM', finished, id)
    make_ready(id, k, seq, ready)
    out[#out + 1] = id
  end
end
return out
