-- KEYS: evseq, events (a stream). ARGV: prefix, event JSON, floor (the publishing server's clock
-- in ms × 1000), maxlen (about how many events the stream keeps). Appends the event, numbered,
-- to the stream; every server reads the stream (XREAD), so events cross servers, and a reader
-- that reconnects resumes where it was. Ids never go backwards, even when Redis lost its
-- counter (restarted without persistence, or a failover lost its last increments): they start
-- again at the floor, above every id handed out before.
local seqk, events = KEYS[1], KEYS[2]
local id = redis.call('INCR', seqk)
local floor = tonumber(ARGV[3])
if id < floor then
  redis.call('SET', seqk, f(floor))
  id = floor
end
redis.call('XADD', events, 'MAXLEN', '~', ARGV[4], '*', 'e',
  '{"id":'..f(id)..','..string.sub(ARGV[2], 2))
return id
