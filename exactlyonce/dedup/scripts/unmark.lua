
local blob = ARGV[1]; local bounds = ARGV[2]; local removed = 0; local grown = 0
for j = 1, #bounds, 8 do
  local s, e = struct.unpack('<I4I4', bounds, j)
  local key = KEYS[1 + (j + 7) / 8]
  local bucket = redis.call('GET', key)
  if bucket then
    local drop = {}
    for k = s + 1, e do drop[string.sub(blob, k * 16 - 15, k * 16)] = true end
    local kept = {}
    for i = 1, #bucket, 16 do
      local id = string.sub(bucket, i, i + 15)
      if drop[id] then removed = removed + 1 else kept[#kept + 1] = id end
    end
    local before = redis.call('MEMORY', 'USAGE', key)
    redis.call('SET', key, table.concat(kept))
    grown = grown + redis.call('MEMORY', 'USAGE', key) - before
  end
end
redis.call('HINCRBY', KEYS[1], 'ids:' .. ARGV[3], 0 - removed)
redis.call('HINCRBY', KEYS[1], 'bytes:' .. ARGV[3], grown)
return removed
