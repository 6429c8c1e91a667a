
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local prefix = ARGV[2]; local blob = ARGV[3]; local groups = ARGV[4]; local grown = 0
for j = 1, #groups, 12 do
  local b, s, e = struct.unpack('<I4I4I4', groups, j)
  local key = prefix .. string.format('%x', b)
  local before = redis.call('MEMORY', 'USAGE', key) or 0
  redis.call('APPEND', key, string.sub(blob, s * 16 + 1, e * 16))
  grown = grown + redis.call('MEMORY', 'USAGE', key) - before
end
redis.call('HINCRBY', KEYS[2], 'ids:' .. ARGV[5], math.floor(#blob / 16))
redis.call('HINCRBY', KEYS[2], 'bytes:' .. ARGV[5], grown)
return 1
