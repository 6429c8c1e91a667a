
local function holds(bucket, id)
  local init = 1
  while true do
    local at = string.find(bucket, id, init, true)
    if not at then return false end
    if (at - 1) % 16 == 0 then return true end
    init = at + 1
  end
end

if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local prefix = ARGV[2]; local blob = ARGV[3]; local groups = ARGV[4]; local out = {}
for j = 1, #groups, 12 do
  local b, s, e = struct.unpack('<I4I4I4', groups, j)
  local bucket = redis.call('GET', prefix .. string.format('%x', b))
  for k = s + 1, e do
    out[k] = (bucket and holds(bucket, string.sub(blob, k * 16 - 15, k * 16))) and '1' or '0'
  end
end
return table.concat(out)
