
local function holds(bucket, id)
  local init = 1
  while true do
    local at = string.find(bucket, id, init, true)
    if not at then return false end
    if (at - 1) % 16 == 0 then return true end
    init = at + 1
  end
end

local function lost()
  redis.call('DEL', KEYS[1])
  return redis.error_reply('CATALOG_LOST')
end

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local blob = ARGV[2]; local bounds = ARGV[3]; local out = {}; local check = ARGV[4] == '1'
if check and redis.call('HGET', KEYS[2], 'i') ~= ARGV[1] then return lost() end
for j = 1, #bounds, 8 do
  local s, e = struct.unpack('<I4I4', bounds, j)
  local key = KEYS[2 + (j + 7) / 8]
  local bucket = redis.call('GET', key)
  if not bucket and check
      and redis.call('HEXISTS', KEYS[2], string.match(key, '}:(c:%d+:%x+)$')) == 1 then
    return lost()
  end
  for k = s + 1, e do
    out[k] = (bucket and holds(bucket, string.sub(blob, k * 16 - 15, k * 16))) and '1' or '0'
  end
end
return table.concat(out)
