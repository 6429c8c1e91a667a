
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local blob = ARGV[2]; local bounds = ARGV[3]; local grown = 0; local check = ARGV[5] == '1'
for j = 1, #bounds, 8 do
  local s, e = struct.unpack('<I4I4', bounds, j)
  local key = KEYS[3 + (j + 7) / 8]
  local before = redis.call('MEMORY', 'USAGE', key)
  if not before then
    local field = string.match(key, '}:(c:%d+:%x+)$')
    if check and redis.call('HEXISTS', KEYS[3], field) == 1 then
      redis.call('DEL', KEYS[1])
      return redis.error_reply('CATALOG_LOST')
    end
    redis.call('HSET', KEYS[3], field, '1')
  end
  redis.call('APPEND', key, string.sub(blob, s * 16 + 1, e * 16))
  grown = grown + redis.call('MEMORY', 'USAGE', key) - (before or 0)
end
redis.call('HINCRBY', KEYS[2], 'ids:' .. ARGV[4], math.floor(#blob / 16))
redis.call('HINCRBY', KEYS[2], 'bytes:' .. ARGV[4], grown)
return 1
