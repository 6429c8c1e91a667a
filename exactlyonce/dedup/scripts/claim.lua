
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local blob = ARGV[2]; local me = ARGV[3]; local take = ARGV[4] == '1'; local out = {}
for k = 1, #blob / 16 do
  local id = string.sub(blob, k * 16 - 15, k * 16)
  local holder = redis.call('HGET', KEYS[2], id)
  if holder == me then
    out[k] = '1'
  elseif holder or not take then
    out[k] = '0'
  else
    redis.call('HSET', KEYS[2], id, me)
    out[k] = '1'
  end
end
return table.concat(out)
