
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local had = redis.call('HGET', KEYS[2], ARGV[2])
if had then return had end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return ARGV[3]
