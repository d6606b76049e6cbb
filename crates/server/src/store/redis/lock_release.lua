local k = p..':lock:'..ARGV[2]
if redis.call('HGET', k, 'token') == ARGV[3] then
  redis.call('DEL', k)
  return 1
end
return 0
