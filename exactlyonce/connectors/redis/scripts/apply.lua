-- The apply script: one task's shards, atomically (see exactlyonce.connectors.redis).
-- KEYS: head, done:<epoch>, done-epochs, stage, dead-letters, stream registry, stage registry.
-- ARGV: epoch, attempt token, staged chunks, config JSON, shards JSON, inline chunks...
-- Returns {status, written, failed, stale, deleted}: 1 applied, 2 applied by this attempt before
-- (a lost reply), 0 another attempt committed these shards, -1 the head already passed the epoch.
-- Upserts (cfg.upsert): a record applies only if its epoch is at least the key's stored one (a
-- hash's epoch field, else its tombstone key cfg.tomb..key; a string's companion cfg.ekey..key);
-- else it is counted stale. A delete leaves that epoch behind (tombstone or companion key).
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
local mode, ttl, fields = cfg.mode, tonumber(cfg.ttl), cfg.fields
local nf = #fields
local written, failed, stale, deleted = 0, 0, 0, 0
local function dead(at, shard, rid, err, payload)
  local a = {'query', cfg.query, 'sink', cfg.sink, 'epoch', at, 'error', err}
  if shard ~= nil and shard ~= cjson.null then a[#a + 1] = 'shard'; a[#a + 1] = shard end
  if rid ~= nil and rid ~= cjson.null then a[#a + 1] = 'record_id'; a[#a + 1] = rid end
  if payload ~= nil and payload ~= cjson.null then a[#a + 1] = 'payload'; a[#a + 1] = payload end
  redis.call('XADD', KEYS[5], '*', unpack(a))
end
local function as_json(cols, i)
  local t = {}
  for j = 1, nf do if cols[j][i] ~= cjson.null then t[fields[j]] = cols[j][i] end end
  return cjson.encode(t)
end
-- One argument table, reused for every record without nulls (no allocation per record).
local cmd, base = 'HSET', 1
local a = {}
if mode == 'stream' then cmd, base, a = 'XADD', 6, {'', '*', cfg.idf, '', cfg.ef, epoch} end
for j = 1, nf do a[base + 2 * j - 1] = fields[j] end
local full = base + 2 * nf
local now = tonumber(epoch)
local function expiring(key, value)
  if ttl > 0 then return redis.call('SET', key, value, 'PX', ttl) end
  return redis.call('SET', key, value)
end
-- The epoch stored for a key (nil: none), or an error reply (a key of another type).
local function stored_epoch(key)
  if mode == 'string' then return tonumber(redis.call('GET', cfg.ekey .. key)) end
  local e = redis.pcall('HGET', key, cfg.ef)
  if type(e) == 'table' then return e end
  if not e then e = redis.call('GET', cfg.tomb .. key) end
  return tonumber(e)
end
local function upsert_one(key, body, i, delete)
  local e = stored_epoch(key)
  if type(e) == 'table' then return e end
  if e and e > now then stale = stale + 1; return nil end
  if delete then
    redis.call('DEL', key)
    expiring(mode == 'string' and cfg.ekey .. key or cfg.tomb .. key, epoch)
    deleted = deleted + 1
    return nil
  end
  if mode == 'string' then
    expiring(key, body[i])
    expiring(cfg.ekey .. key, epoch)
  else
    local args = {key}
    for j = 1, nf do
      local v = body[j][i]
      if v ~= cjson.null then args[#args + 1] = fields[j]; args[#args + 1] = v end
    end
    args[#args + 1] = cfg.ef; args[#args + 1] = epoch
    redis.call('DEL', key, cfg.tomb .. key)
    redis.call('HSET', unpack(args))
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  end
  written = written + 1
  return nil
end
local function apply_upserts(keys, ids, body, deletes)
  for i = 1, #keys do
    local r = upsert_one(keys[i], body, i, deletes[i])
    if r then
      failed = failed + 1
      dead(epoch, nil, ids[i], 'redis: ' .. r.err, mode == 'string' and body[i] or as_json(body, i))
    end
  end
end
local function apply(c)
  if c[1] == 'd' then
    for _, d in ipairs(c[2]) do dead(d[1], d[2], d[3], d[4], d[5]) end
    return
  end
  local keys, ids, body = c[2], c[3], c[4]
  if cfg.upsert then return apply_upserts(keys, ids, body, c[5]) end
  local streams = {}
  for i = 1, #keys do
    local key, r = keys[i], nil
    if mode == 'string' then
      if ttl > 0 then r = redis.pcall('SET', key, body[i], 'PX', ttl)
      else r = redis.pcall('SET', key, body[i]) end
    else
      a[1] = key
      if base == 6 then a[4] = ids[i] end
      local args, n = a, full
      for j = 1, nf do
        local v = body[j][i]
        if v == cjson.null then args = nil; break end
        a[base + 2 * j] = v
      end
      if args == nil then -- null fields are left out
        args, n = {}, base
        for t = 1, base do args[t] = a[t] end
        for j = 1, nf do
          local v = body[j][i]
          if v ~= cjson.null then args[n + 1] = fields[j]; args[n + 2] = v; n = n + 2 end
        end
      end
      r = redis.pcall(cmd, unpack(args, 1, n))
      if base == 1 and ttl > 0 and type(r) ~= 'table' then redis.pcall('PEXPIRE', key, ttl) end
    end
    if type(r) == 'table' and r.err then
      failed = failed + 1
      dead(epoch, nil, ids[i], 'redis: ' .. r.err, mode == 'string' and body[i] or as_json(body, i))
    else
      written = written + 1
      if mode == 'stream' then streams[key] = true end
    end
  end
  for key in pairs(streams) do
    redis.call('SADD', KEYS[6], key)
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  end
end
for i = 1, nstaged do apply(cjson.decode(redis.call('HGET', KEYS[4], tostring(i)))) end
for i = 6, #ARGV do apply(cjson.decode(ARGV[i])) end
redis.call('HSET', KEYS[2], 'w:' .. token, table.concat({written, failed, stale, deleted}, ' '))
drop_stage()
return {1, written, failed, stale, deleted}
