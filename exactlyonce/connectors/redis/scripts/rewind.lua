-- The head moves back (exactlyonce rewind), after the records above the epoch were removed.
-- KEYS: head, done-epochs, stage registry. ARGV: epoch, now, done prefix.
-- The Spark query id is cleared (the next run binds its own); shard markers and staging of
-- epochs above the epoch go. Never moves the head forward. Returns 1, or 0 without a head.
local head = redis.call('HGET', KEYS[1], 'epoch')
if not head then return 0 end
local e = tonumber(ARGV[1])
if tonumber(head) > e then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'updated_at', ARGV[2])
  redis.call('HDEL', KEYS[1], 'spark_query_id')
end
for _, d in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if tonumber(d) > e then redis.call('DEL', ARGV[3] .. d); redis.call('SREM', KEYS[2], d) end
end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local at = tonumber(string.match(k, ':stage:(%d+):[^:]*$'))
  if at and at > e then redis.call('DEL', k); redis.call('SREM', KEYS[3], k) end
end
return 1
