-- The Real-time Mode commit: one chunk of a task's rows and its source frontiers, atomically
-- (see exactlyonce.connectors.redis.realtime). Runs after records.lua (eo_records), which
-- lua.py puts in front of it.
-- KEYS: frontiers hash (field topic|partition -> next offset), claims hash (field ->
--   spark_query_id|epoch|spark_partition|writer), dead-letters, stream registry.
-- ARGV: epoch, config JSON (as apply.lua's), expected JSON {field: offset or null}, next JSON
--   {field: offset}, this writer's claim, its Spark query id ('' when unknown), its Spark
--   partition, chunks...
-- Returns {written, failed}. Errors, before any write: EO_FRONTIER_MOVED (a frontier is not
-- what the writer read: another attempt moved it), EO_SHUFFLED (two Spark tasks of one epoch
-- write one source partition).
local epoch, cfg = ARGV[1], cjson.decode(ARGV[2])
local expected, nexts = cjson.decode(ARGV[3]), cjson.decode(ARGV[4])
local claim, query_id, spark_partition = ARGV[5], ARGV[6], ARGV[7]
for field, want in pairs(expected) do
  local found = redis.call('HGET', KEYS[1], field)
  local same
  if want == cjson.null then same = (found == false)
  else same = (found ~= false and tonumber(found) == tonumber(want)) end
  local by = redis.call('HGET', KEYS[2], field)
  if not same then
    return redis.error_reply('EO_FRONTIER_MOVED the frontier of ' .. field .. ' is ' ..
      tostring(found or 'none') .. ', not ' .. tostring(want == cjson.null and 'none' or want) ..
      ' as this writer read it: writer ' .. tostring(by or 'none') .. ' moved it')
  end
  if by and query_id ~= '' then
    local q, e, p = string.match(by, '^([^|]*)|([^|]*)|([^|]*)|')
    if q == query_id and e == epoch and p ~= spark_partition then
      return redis.error_reply('EO_SHUFFLED source partition ' .. field .. ' is written by ' ..
        'two Spark tasks of epoch ' .. epoch .. ' (partitions ' .. p .. ' and ' ..
        spark_partition .. ')')
    end
  end
end
-- The frontiers are the first write: a full Redis refuses it here, before any record.
for field, n in pairs(nexts) do
  redis.call('HSET', KEYS[1], field, n)
  redis.call('HSET', KEYS[2], field, claim)
end
local apply, counts = eo_records(cfg, epoch, KEYS[3], KEYS[4])
for i = 8, #ARGV do apply(cjson.decode(ARGV[i])) end
return {counts.written, counts.failed}
