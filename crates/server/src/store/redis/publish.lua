local id = redis.call('INCR', p..':evseq')
redis.call('PUBLISH', p..':events', '{"id":'..id..','..string.sub(ARGV[2], 2))
return id
