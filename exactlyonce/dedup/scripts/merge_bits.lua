
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local bloom = KEYS[3]; local version = KEYS[4]; local presence = KEYS[6]
if ARGV[4] == '1' and redis.call('EXISTS', bloom) == 0
    and redis.call('HEXISTS', presence, 'b:' .. ARGV[3]) == 1 then
  redis.call('DEL', KEYS[1])
  return redis.error_reply('CATALOG_LOST')
end
local before = (redis.call('MEMORY', 'USAGE', bloom) or 0) + (redis.call('MEMORY', 'USAGE', version) or 0)
local size = tonumber(ARGV[5])
if redis.call('STRLEN', bloom) < size then redis.call('SETRANGE', bloom, size - 1, '\0') end
local bits = ARGV[2]
for j = 1, #bits, 4 do
  redis.call('SETBIT', bloom, struct.unpack('<I4', bits, j), 1)
end
redis.call('HSET', presence, 'b:' .. ARGV[3], '1')
local v = redis.call('INCR', version)
local after = redis.call('MEMORY', 'USAGE', bloom) + redis.call('MEMORY', 'USAGE', version)
redis.call('HINCRBY', KEYS[2], 'bytes:' .. ARGV[3], after - before)
return v
