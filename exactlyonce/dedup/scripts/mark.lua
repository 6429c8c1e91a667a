
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local prefix = ARGV[2]; local blob = ARGV[3]; local groups = ARGV[4]
for j = 1, #groups, 12 do
  local b, s, e = struct.unpack('<I4I4I4', groups, j)
  redis.call('APPEND', prefix .. string.format('%x', b), string.sub(blob, s * 16 + 1, e * 16))
end
return 1
