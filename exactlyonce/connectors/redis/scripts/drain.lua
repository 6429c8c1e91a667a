-- The drainer's Redis step: one writer's share of a buffer chunk, atomically (see
-- exactlyonce.buffer.drain.redis_target). Runs after the Redis sink's records.lua
-- (eo_records: records applied exactly as the sink's tasks apply them).
-- KEYS: the drain offsets hash (partition -> next offset), dead-letters stream, stream registry.
-- ARGV: ownership JSON {member, members, writer, writers}, held JSON {partition: offset} (the
--       owned partitions' stored offsets as the drainer last saw them), new JSON {partition:
--       offset} (the owned partitions' offsets after the share), config JSON, chunks...
-- Returns {written, failed}, or the error EO_OFFSETS_MOVED (nothing written) when the stored
-- offsets of the owned partitions are not the held ones (the compare-and-set).
local own = cjson.decode(ARGV[1])
local held = cjson.decode(ARGV[2])
local new = cjson.decode(ARGV[3])
local cfg = cjson.decode(ARGV[4])
local want = {[1] = 'hash', [2] = 'stream', [3] = 'set'}
for i, kind in pairs(want) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('EO_WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
local function owned(p)
  return p % own.members == own.member and math.floor(p / own.members) % own.writers == own.writer
end
local stored, seen = redis.call('HGETALL', KEYS[1]), 0
for i = 1, #stored, 2 do
  local p = tonumber(stored[i])
  if p and owned(p) then
    if held[stored[i]] ~= stored[i + 1] then
      return redis.error_reply('EO_OFFSETS_MOVED partition ' .. stored[i] .. ' is at ' ..
        stored[i + 1] .. ', not ' .. tostring(held[stored[i]]))
    end
    seen = seen + 1
  end
end
for p, o in pairs(held) do
  seen = seen - 1
end
if seen ~= 0 then
  return redis.error_reply('EO_OFFSETS_MOVED a held partition has no stored offset')
end
-- The offsets are the first write: a full Redis refuses it here, before any record.
local set = {}
for p, o in pairs(new) do set[#set + 1] = p; set[#set + 1] = o end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
local apply, counts = eo_records(cfg, '', KEYS[2], KEYS[3])
for i = 5, #ARGV do apply(cjson.decode(ARGV[i])) end
return {counts.written, counts.failed}
