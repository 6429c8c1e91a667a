-- The apply script: one task's shards, atomically (see exactlyonce.connectors.redis).
-- Runs after records.lua (eo_records), which lua.py puts in front of it.
-- KEYS: head, done:<epoch>, done-epochs, stage, dead-letters, stream registry, stage registry.
-- ARGV: epoch, attempt token, staged chunks, config JSON, shards JSON, inline chunks...
-- Returns {status, written, failed, stale, deleted[, unchanged]}: 1 applied, 2 applied by this attempt before
-- (a lost reply), 0 another attempt committed these shards, -1 the head already passed the epoch.
-- Upserts (cfg.upsert): see records.lua (the epoch guard).
local epoch, token, nstaged = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cfg = cjson.decode(ARGV[4])
local shards = cjson.decode(ARGV[5])
local function drop_stage() redis.call('DEL', KEYS[4]); redis.call('SREM', KEYS[7], KEYS[4]) end
local head = redis.call('HGET', KEYS[1], 'epoch')
if not head then
  drop_stage()
  return redis.error_reply('EO_HEAD_LOST the sink head ' .. KEYS[1] .. ' is missing')
end
local want = {[2] = 'hash', [3] = 'set', [5] = 'stream', [6] = 'set', [7] = 'set'}
for i, kind in pairs(want) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('EO_WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
if tonumber(head) >= tonumber(epoch) then drop_stage(); return {-1, 0, 0, 0, 0} end
for _, s in ipairs(shards) do
  local by = redis.call('HGET', KEYS[2], s)
  if by then
    drop_stage()
    if by == token then
      local w = redis.call('HGET', KEYS[2], 'w:' .. token) or '0 0 0 0'
      local a, b, c, d = string.match(w, '^(%d+) (%d+) (%d+) (%d+)$')
      return {2, tonumber(a) or 0, tonumber(b) or 0, tonumber(c) or 0, tonumber(d) or 0}
    end
    return {0, 0, 0, 0, 0}
  end
end
if nstaged > 0 and redis.call('HLEN', KEYS[4]) ~= nstaged then
  drop_stage()
  return redis.error_reply('EO_STAGING_LOST staged chunks of ' .. KEYS[4] .. ' are missing')
end
-- The markers are the first write: a full Redis refuses it here, before any record.
for _, s in ipairs(shards) do redis.call('HSET', KEYS[2], s, token) end
redis.call('SADD', KEYS[3], epoch)
local apply, counts = eo_records(cfg, epoch, KEYS[5], KEYS[6])
for i = 1, nstaged do apply(cjson.decode(redis.call('HGET', KEYS[4], tostring(i)))) end
for i = 6, #ARGV do apply(cjson.decode(ARGV[i])) end
redis.call('HSET', KEYS[2], 'w:' .. token,
  table.concat({counts.written, counts.failed, counts.stale, counts.deleted}, ' '))
drop_stage()
return {1, counts.written, counts.failed, counts.stale, counts.deleted, counts.unchanged}
