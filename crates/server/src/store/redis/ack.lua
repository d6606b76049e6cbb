-- KEYS: the job hash, its history list, leased, finished (the index of finished ids, scored
-- by the order they finished), finseq (its counter).
-- ARGV: prefix, id, token, result JSON, retention ('' = keep), the result's model id.
-- Reply: {'1', fence, text} done · {'2'} repeated · {'0'} stale · {'-1'} missing ·
-- {'m', model} refused: the job is of another model (nothing changes, the lease stays).
local k, hist, leased, finished, finseq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, token = ARGV[2], ARGV[3]
local h = redis.call('HMGET', k, 'state', 'token', 'done_token', 'fence', 'text', 'model_id')
if not h[1] then return {'-1'} end
if h[1] == 'leased' and h[2] == token then
  if h[6] and h[6] ~= '' and h[6] ~= ARGV[6] then return {'m', h[6]} end
  redis.call('HSET', k, 'state', 'done', 'result', ARGV[4], 'done_token', token)
  redis.call('HDEL', k, 'token', 'expires_at', 'fence')
  redis.call('ZREM', leased, id)
  redis.call('ZADD', finished, f(redis.call('INCR', finseq)), id)
  if ARGV[5] ~= '' then
    redis.call('PEXPIRE', k, ARGV[5])
    redis.call('PEXPIRE', hist, ARGV[5])
  end
  return {'1', h[4] or '0', h[5] or ''}
elseif h[1] == 'done' and h[3] == token then
  return {'2'}
end
return {'0'}
