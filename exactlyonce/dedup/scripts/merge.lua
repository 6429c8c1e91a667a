
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local bloom = ARGV[2]; local version = ARGV[3]; local tmp = ARGV[4]
local before = (redis.call('MEMORY', 'USAGE', bloom) or 0) + (redis.call('MEMORY', 'USAGE', version) or 0)
redis.call('SET', tmp, ARGV[5])
redis.call('BITOP', 'OR', bloom, bloom, tmp)
redis.call('DEL', tmp)
local v = redis.call('INCR', version)
local after = redis.call('MEMORY', 'USAGE', bloom) + redis.call('MEMORY', 'USAGE', version)
redis.call('HINCRBY', KEYS[2], 'bytes:' .. ARGV[6], after - before)
return v
