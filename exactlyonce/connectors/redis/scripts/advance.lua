-- The driver's head advance.
-- KEYS: head, done-epochs, stage registry. ARGV: epoch, spark query id or '', now, done prefix.
-- Also drops what attempts killed mid-write staged for epochs at or below the head.
local head = redis.call('HGET', KEYS[1], 'epoch')
if not head then
  return redis.error_reply('EO_HEAD_LOST the sink head ' .. KEYS[1] .. ' is missing')
end
local e = tonumber(ARGV[1])
if tonumber(head) < e then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'updated_at', ARGV[3])
  if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'spark_query_id', ARGV[2]) end
end
for _, d in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if tonumber(d) <= e then redis.call('DEL', ARGV[4] .. d); redis.call('SREM', KEYS[2], d) end
end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local at = tonumber(string.match(k, ':stage:(%d+):[^:]*$'))
  if at and at <= e then redis.call('DEL', k); redis.call('SREM', KEYS[3], k) end
end
return 1
