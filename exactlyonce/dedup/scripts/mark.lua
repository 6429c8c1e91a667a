
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local blob = ARGV[2]; local bounds = ARGV[3]; local grown = 0
for j = 1, #bounds, 8 do
  local s, e = struct.unpack('<I4I4', bounds, j)
  local key = KEYS[2 + (j + 7) / 8]
  local before = redis.call('MEMORY', 'USAGE', key) or 0
  redis.call('APPEND', key, string.sub(blob, s * 16 + 1, e * 16))
  grown = grown + redis.call('MEMORY', 'USAGE', key) - before
end
redis.call('HINCRBY', KEYS[2], 'ids:' .. ARGV[4], math.floor(#blob / 16))
redis.call('HINCRBY', KEYS[2], 'bytes:' .. ARGV[4], grown)
return 1
