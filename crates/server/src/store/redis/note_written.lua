-- KEYS: the writer's job rows (wj, a sorted set), its cache-entry rows (wc), and earlier
-- versions' set of its rows (wrote, never trimmed). ARGV: prefix, how long job rows are kept
-- ('' = forever: finished jobs are), how long cache rows are kept, then the items (`j:{id}`,
-- `c:{key}`). Each row is scored by its write time (Redis's clock: the jobs' retention is Redis's
-- PEXPIRE too); rows older than what they can name are trimmed, so a writer's index stays the
-- size of what it wrote within the retention and the longest cache TTL. Up to 1 000 rows of the
-- old set move in with each write, scored as written now (the trims then take them in time).
local wj, wc, wrote = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = f(now)
local js, cs = {}, {}
local function add(item)
  if string.sub(item, 1, 2) == 'j:' then
    js[#js + 1] = at; js[#js + 1] = item
  else
    cs[#cs + 1] = at; cs[#cs + 1] = item
  end
end
for i = 4, #ARGV do
  add(ARGV[i])
end
local moved = redis.call('SPOP', wrote, 1000)
for _, item in ipairs(moved) do
  add(item)
end
zadd_all(wj, js)
zadd_all(wc, cs)
if ARGV[2] ~= '' then
  redis.call('ZREMRANGEBYSCORE', wj, '-inf', '(' .. f(now - tonumber(ARGV[2])))
end
redis.call('ZREMRANGEBYSCORE', wc, '-inf', '(' .. f(now - tonumber(ARGV[3])))
return #js / 2 + #cs / 2
