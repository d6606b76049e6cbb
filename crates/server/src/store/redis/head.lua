-- Prepended to every script (max_history is set from Rust's MAX_HISTORY on the line before).
-- Every key a script touches that its caller can name is declared in KEYS[] (each script's
-- header lists them), so Redis Cluster routes the script to the master holding them. ARGV[1] is
-- the store's key prefix, a hash tag such as `{tf:t:acme}`; only claim.lua and cache_sweep.lua
-- use it, to name the keys of the ids they find in a sorted set (which no caller can know
-- beforehand): those keys carry the same tag, so they are in the same slot as KEYS[].
local p = ARGV[1]
local function push_history(hk, entry)
  redis.call('RPUSH', hk, entry)
  redis.call('LTRIM', hk, -max_history, -1)
end
-- A number as Redis wants it: integers below 2^53 through '%d' (the C library's integer path;
-- '%.0f' of a 16-digit fence or a ms clock takes its multi-precision float path, and a Lua number
-- handed to redis.call as is goes through '%.17g': both showed as ~8 % of Redis's CPU under the
-- queue benchmark), anything else as before.
local function f(x)
  if x > -9007199254740992 and x < 9007199254740992 and x == math.floor(x) then
    return string.format('%d', x)
  end
  return string.format('%.0f', x)
end
-- Adds to `hist` the entry of the delivery of leased job hash `k` that ended at `now` with the
-- error `errjson` (who held it, its attempt, when it began); returns the attempt number.
local function push_attempt(k, hist, errjson, now)
  local h = redis.call('HMGET', k, 'attempt', 'worker', 'leased_at', 'sub')
  push_history(hist, cjson.encode({attempt = tonumber(h[1]), worker = h[2], sub = h[4] or nil,
    leased_at = tonumber(h[3]), ended_at = now, error = cjson.decode(errjson)}))
  return tonumber(h[1])
end
-- Puts job `id` (hash `k`) in the ready set (`readyk`), numbered by the counter `seqk`.
local function make_ready(id, k, seqk, readyk)
  local seq = redis.call('INCR', seqk)
  local pri = tonumber(redis.call('HGET', k, 'priority')) or 0
  redis.call('HSET', k, 'state', 'ready', 'seq', f(seq))
  redis.call('ZADD', readyk, f(-pri * 1099511627776 + seq % 1099511627776), id)
end
-- Ends the delivery of leased job `id` (hash `k`, history list `hist`) as an attempt that counts
-- (an expired lease, a release past the free ones): the attempt joins the history with the error
-- `errjson`, and the job is dead-lettered (`dlqk`) on its `maxatt`-th attempt, else ready again.
-- The caller has taken it out of the leased set. Returns true when dead.
local function end_delivery(id, k, hist, errjson, maxatt, now, seqk, readyk, dlqk)
  local attempt = push_attempt(k, hist, errjson, now)
  redis.call('HDEL', k, 'token', 'fence', 'expires_at')
  if attempt >= maxatt then
    redis.call('HSET', k, 'state', 'dead', 'error', errjson, 'dead_at', f(now))
    redis.call('ZADD', dlqk, f(now), id)
    return true
  end
  make_ready(id, k, seqk, readyk)
  return false
end
-- Draws `n` fences from the counter `fk`: returns `base`, the fences being base + 1 .. base + n.
-- Never below `floor` (the server's clock in ms × 1000): when a failover or a restart lost the
-- counter's latest increments, the fences drawn after it are still above every fence drawn
-- before it, as the clock moved on meanwhile.
local function draw_fences(fk, n, floor)
  local base = redis.call('INCRBY', fk, n) - n
  if base < floor then
    base = floor
    redis.call('SET', fk, f(base + n))
  end
  return base
end
-- Adds `flat` (score, member, score, member, …) to the sorted set `key`, in slices: unpack() is
-- bounded by Lua's C stack (LUAI_MAXCSTACK, 8000 in Redis).
local function zadd_all(key, flat)
  for s = 1, #flat, 2000 do
    redis.call('ZADD', key, unpack(flat, s, math.min(s + 1999, #flat)))
  end
end
