-- How records are applied: shared by apply.lua (the sink's tasks) and the buffer drainer's
-- script (exactlyonce/buffer/drain/redis_drain.lua); lua.py puts it in front of either.
-- eo_records(cfg, epoch, dead_key, streams_key) -> apply, counts
--   cfg: {mode, ttl, fields, idf, ef, query, sink[, upsert, tomb, ekey]}; epoch: of records
--   without their own; dead_key: the dead-letter stream; streams_key: the set of streams
--   appended to.
--   apply(chunk) applies one decoded chunk: {'r', keys, ids, body[, epochs[, deletes]]}
--   (records: body is the JSON strings in string mode, else one list of values per field;
--   epochs, when not null, one per record; deletes, with cfg.upsert, one tombstone flag per
--   record) or {'d', {{epoch, shard, id, error, payload}, ...}} (dead letters).
--   Upserts (cfg.upsert): a record applies only if its epoch is at least the key's stored one
--   (a hash's epoch field, else its tombstone key cfg.tomb..key; a string's companion key
--   cfg.ekey..key), else it is counted stale. A delete leaves its epoch behind (tombstone or
--   companion key), so an older epoch never resurrects the key.
--   counts.written, .failed, .stale, .deleted, .unchanged: records applied, refused
--   (dead-lettered), skipped as older than the stored epoch, deleted, and skipped because
--   their key held them already (cfg.unaligned only), so far.
--   cfg.unaligned: the Spark data source path, whose tasks are not shard-aligned and write no
--   shard markers; a hash or string record whose key holds it already is not written again.
--   cfg.guarded: key prefixes no record may be written under (the sink's head, shard markers,
--   offsets, the catalog: DESIGN invariant 14); a record whose key begins with one is refused,
--   counted failed and dead-lettered with why, before anything reads or writes its key.
local function eo_records(cfg, epoch, dead_key, streams_key)
  local mode, ttl, fields = cfg.mode, tonumber(cfg.ttl), cfg.fields
  local nf = #fields
  local counts = {written = 0, failed = 0, stale = 0, deleted = 0, unchanged = 0}
  local guarded = cfg.guarded or {}
  local guarding = #guarded > 0
  -- Why ``key`` may not be written (it lies in a control namespace), or nil.
  local function refusal(key)
    if not guarding then return nil end
    for _, ns in ipairs(guarded) do
      if string.sub(key, 1, #ns) == ns then
        return {err = 'control', why = 'key ' .. key .. " is in the sink's control namespace " ..
          ns .. ' (its head, shard markers, offsets and catalog): change key_template or prefix'}
      end
    end
    return nil
  end
  local function reason(r) return r.why or ('redis: ' .. r.err) end
  local function dead(at, shard, rid, err, payload)
    local a = {'query', cfg.query, 'sink', cfg.sink, 'epoch', at, 'error', err}
    if shard ~= nil and shard ~= cjson.null then a[#a + 1] = 'shard'; a[#a + 1] = shard end
    if rid ~= nil and rid ~= cjson.null then a[#a + 1] = 'record_id'; a[#a + 1] = rid end
    if payload ~= nil and payload ~= cjson.null then a[#a + 1] = 'payload'; a[#a + 1] = payload end
    redis.call('XADD', dead_key, '*', unpack(a))
  end
  -- cfg.unaligned (hash and string writes from tasks that are not shard-aligned: the Spark
  -- data source path): whether the key already holds record i, so writing it again would
  -- change nothing; it is then skipped, counted unchanged, and not written a second time.
  local function holds(key, body, i)
    if mode == 'string' then return redis.pcall('GET', key) == body[i] end
    local want, names = {}, {}
    for j = 1, nf do
      if body[j][i] ~= cjson.null then want[#want + 1] = body[j][i]; names[#names + 1] = fields[j] end
    end
    if #names == 0 then return redis.pcall('EXISTS', key) == 1 end
    local got = redis.pcall('HMGET', key, unpack(names))
    if type(got) ~= 'table' or got.err then return false end
    for j = 1, #names do if got[j] ~= want[j] then return false end end
    return true
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
  local function upsert_one(key, body, i, delete, at)
    local refused = refusal(key)
    if refused then return refused end
    local e = stored_epoch(key)
    if type(e) == 'table' then return e end
    if e and e > tonumber(at) then counts.stale = counts.stale + 1; return nil end
    if delete then
      redis.call('DEL', key)
      expiring(mode == 'string' and cfg.ekey .. key or cfg.tomb .. key, at)
      counts.deleted = counts.deleted + 1
      return nil
    end
    if mode == 'string' then
      expiring(key, body[i])
      expiring(cfg.ekey .. key, at)
    else
      local args = {key}
      for j = 1, nf do
        local v = body[j][i]
        if v ~= cjson.null then args[#args + 1] = fields[j]; args[#args + 1] = v end
      end
      args[#args + 1] = cfg.ef; args[#args + 1] = at
      redis.call('DEL', key, cfg.tomb .. key)
      redis.call('HSET', unpack(args))
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end
    counts.written = counts.written + 1
    return nil
  end
  local function apply_upserts(keys, ids, body, epochs, deletes)
    for i = 1, #keys do
      local at = epoch
      if epochs and epochs ~= cjson.null then at = epochs[i] end
      local r = upsert_one(keys[i], body, i, deletes[i] == true, at)
      if r then
        counts.failed = counts.failed + 1
        dead(at, nil, ids[i], reason(r), mode == 'string' and body[i] or as_json(body, i))
      end
    end
  end
  local function apply(c)
    if c[1] == 'd' then
      for _, d in ipairs(c[2]) do dead(d[1], d[2], d[3], d[4], d[5]) end
      return
    end
    local keys, ids, body, epochs = c[2], c[3], c[4], c[5]
    if epochs == cjson.null then epochs = nil end
    if cfg.upsert then return apply_upserts(keys, ids, body, epochs, c[6]) end
    local streams = {}
    for i = 1, #keys do
      local key, r, at = keys[i], nil, epoch
      if epochs then at = epochs[i] end
      local refused = refusal(key)
      if refused then
        r = refused
      elseif cfg.unaligned and holds(key, body, i) then
        counts.unchanged = counts.unchanged + 1
      elseif mode == 'string' then
        if ttl > 0 then r = redis.pcall('SET', key, body[i], 'PX', ttl)
        else r = redis.pcall('SET', key, body[i]) end
      else
        a[1] = key
        if base == 6 then a[4] = ids[i]; a[6] = at end
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
      if r == nil then -- the key holds the record already: nothing written
      elseif type(r) == 'table' and r.err then
        counts.failed = counts.failed + 1
        dead(at, nil, ids[i], reason(r), mode == 'string' and body[i] or as_json(body, i))
      else
        counts.written = counts.written + 1
        if mode == 'stream' then streams[key] = true end
      end
    end
    for key in pairs(streams) do
      redis.call('SADD', streams_key, key)
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end
  end
  return apply, counts
end
