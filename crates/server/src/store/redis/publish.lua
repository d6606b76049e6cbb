-- ARGV: prefix, event JSON, floor (the publishing server's clock in ms × 1000). Ids never go
-- backwards, even when Redis lost its counter (restarted without persistence): they start again
-- at the floor, above every id handed out before.
local id = redis.call('INCR', p..':evseq')
local floor = tonumber(ARGV[3])
if id < floor then
  redis.call('SET', p..':evseq', string.format('%.0f', floor))
  id = floor
end
redis.call('PUBLISH', p..':events', '{"id":'..string.format('%.0f', id)..','..string.sub(ARGV[2], 2))
return id
