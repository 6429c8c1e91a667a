
local prefix = ARGV[1]; local blob = ARGV[2]; local bits = tonumber(ARGV[3])
local drop = {}; local keys = {}
for j = 1, #blob, 16 do
  local id = string.sub(blob, j, j + 15)
  local b = math.floor((string.byte(id, 1) * 256 + string.byte(id, 2)) / (2 ^ (16 - bits)))
  local key = prefix .. string.format('%x', b)
  if not drop[key] then drop[key] = {}; keys[#keys + 1] = key end
  drop[key][id] = true
end
local removed = 0; local grown = 0
for _, key in ipairs(keys) do
  local bucket = redis.call('GET', key)
  if bucket then
    local kept = {}
    for j = 1, #bucket, 16 do
      local id = string.sub(bucket, j, j + 15)
      if drop[key][id] then removed = removed + 1 else kept[#kept + 1] = id end
    end
    local before = redis.call('MEMORY', 'USAGE', key)
    redis.call('SET', key, table.concat(kept))
    grown = grown + redis.call('MEMORY', 'USAGE', key) - before
  end
end
redis.call('HINCRBY', KEYS[1], 'ids:' .. ARGV[4], 0 - removed)
redis.call('HINCRBY', KEYS[1], 'bytes:' .. ARGV[4], grown)
return removed
