-- The head's creation, if it does not exist yet (returns 0 then).
-- KEYS: head. ARGV: epoch, num_shards, spark query id or '', now.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'num_shards', ARGV[2], 'updated_at', ARGV[4])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'spark_query_id', ARGV[3]) end
return 1
