-- How records are applied: shared by apply.lua (the sink's tasks) and the buffer drainer's
-- script (exactlyonce/buffer/drain/redis_drain.lua); lua.py puts it in front of either.
-- eo_records(cfg, epoch, dead_key, streams_key) -> apply, counts
--   cfg: {mode, ttl, fields, idf, ef, query, sink}; epoch: of records without their own;
--   dead_key: the dead-letter stream; streams_key: the set of streams appended to.
--   apply(chunk) applies one decoded chunk: {'r', keys, ids, body[, epochs]} (records: body
--   is the JSON strings in string mode, else one list of values per field; epochs, when
--   given, one per record) or {'d', {{epoch, shard, id, error, payload}, ...}} (dead letters).
--   counts.written, counts.failed: records applied, and refused (dead-lettered) so far.
local function eo_records(cfg, epoch, dead_key, streams_key)
  local mode, ttl, fields = cfg.mode, tonumber(cfg.ttl), cfg.fields
  local nf = #fields
  local counts = {written = 0, failed = 0}
  local function dead(at, shard, rid, err, payload)
    local a = {'query', cfg.query, 'sink', cfg.sink, 'epoch', at, 'error', err}
    if shard ~= nil and shard ~= cjson.null then a[#a + 1] = 'shard'; a[#a + 1] = shard end
    if rid ~= nil and rid ~= cjson.null then a[#a + 1] = 'record_id'; a[#a + 1] = rid end
    if payload ~= nil and payload ~= cjson.null then a[#a + 1] = 'payload'; a[#a + 1] = payload end
    redis.call('XADD', dead_key, '*', unpack(a))
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
  local function apply(c)
    if c[1] == 'd' then
      for _, d in ipairs(c[2]) do dead(d[1], d[2], d[3], d[4], d[5]) end
      return
    end
    local keys, ids, body, epochs = c[2], c[3], c[4], c[5]
    local streams = {}
    for i = 1, #keys do
      local key, r, at = keys[i], nil, epoch
      if epochs then at = epochs[i] end
      if mode == 'string' then
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
      if type(r) == 'table' and r.err then
        counts.failed = counts.failed + 1
        dead(at, nil, ids[i], 'redis: ' .. r.err, mode == 'string' and body[i] or as_json(body, i))
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
