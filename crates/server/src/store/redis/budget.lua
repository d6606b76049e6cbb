-- KEYS: the budgets (a string each: the budget's theoretical arrival time, Unix µs on Redis's
-- clock). ARGV: prefix, the cost, then each budget's units a minute, in KEYS order.
-- GCRA (the generic cell rate algorithm, what `governor` runs in each server): a budget of n a
-- minute refills one unit every 60 s / n and holds at most a minute's worth; it pays cost c when
-- its arrival time, moved on by c units, is at most a minute ahead of now. Every budget pays or
-- none does (a token's budget is not spent by a request its tenant's refuses). A key lives until
-- its budget is full again (PX), so budgets nobody spends take no room.
-- Returns {0, 0, 0}: spent; {1, i, ms}: budget i (1-based) can pay in ms; {2, i, 0}: the cost is
-- more than a minute's worth of budget i.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local minute = 60000000
local cost = tonumber(ARGV[2])
local tats = {}
for i = 1, #KEYS do
  local per_min = tonumber(ARGV[2 + i])
  if cost > per_min then
    return {2, i, 0}
  end
  local v = redis.call('GET', KEYS[i])
  local tat = v and tonumber(v) or now
  if tat < now then
    tat = now
  end
  local next_tat = tat + cost * minute / per_min
  local allow_at = next_tat - minute
  if allow_at > now then
    return {1, i, math.ceil((allow_at - now) / 1000)}
  end
  tats[i] = math.ceil(next_tat)
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], f(tats[i]), 'PX', f(math.ceil((tats[i] - now) / 1000)))
end
return {0, 0, 0}
