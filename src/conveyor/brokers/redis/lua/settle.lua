-- settle.lua: apply execution outcomes, each fenced by its lease token (compare-and-set).
-- KEYS: the standard one (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) = n, A(2) = a JSON array of n * 8 strings, per outcome: task id, token, kind
--       (complete|retry|archive|release), result (opt), error (opt), run_at ("" none), reason (opt),
--       keep_for.
-- Returns: one string, per outcome "1" (applied) or "0" (task missing, not active, or another token
--          holds it).
-- Costs per outcome: one HMGET of 5 fields for the fence; `complete` then writes directly, the other
--   kinds load the task (one HMGET more).
-- Transition: active -> completed (result, keep_until = now + keep_for) | retry (retries + 1, at
--             run_at or now, error recorded) | archived (reason, default failed; error recorded) |
--             pending, or scheduled if run_at > now (release: the attempt is given back).
local n = tonumber(A(1))
local V = cjson.decode(A(2))
local applied = {}
DEFER = true -- no sorted set is read below
for i = 0, n - 1 do
  local b = 1 + i * 8
  local id, token, kind = V[b], V[b + 1], V[b + 2]
  -- the fence first, reading only what it and `complete` need (the other kinds load the whole task)
  local v = redis.call('HMGET', tkey(id), 's', 'tk', 'q', 'm', 'le')
  if v[1] ~= 'active' or v[2] ~= token or token == '' or not v[3] or not v[4] then
    applied[i + 1] = '0'
  elseif kind == 'complete' then
    -- active -> completed, written directly (what finish_task() would write for this case)
    local q, m, result = v[3], v[4], opt(V[b + 3])
    local kus = f(NOW + tonumber(V[b + 7]))
    -- tk, lx and c are left as they were: they mean nothing outside `active` (see codec.py)
    if result then
      redis.call('HSET', tkey(id), 's', 'completed', 'res', result, 'fa', NOWS, 'ku', kus)
    else
      redis.call('HSET', tkey(id), 's', 'completed', 'fa', NOWS, 'ku', kus)
    end
    if v[5] then redis.call('HDEL', tkey(id), 'le') end
    zop('ZREM', qkey(q, 'active'), m)
    zop('ZREM', LEASES, m)
    zop('ZADD', qkey(q, 'completed'), NOWS, m)
    zop('ZADD', qkey(q, 'completed:keep'), kus, m)
    event(id, 'active', 'completed', q)
    applied[i + 1] = '1'
  else
    local t = load(id)
    local err, run_at, reason = opt(V[b + 4]), num(V[b + 5]), opt(V[b + 6])
    if kind == 'retry' then
      err = err or 'Retry'
      t.r, t.nr = t.r + 1, run_at or NOW
      add_error(t, err)
      move(t, 'retry', {r = tostring(t.r), nr = f(t.nr), le = err, c = '0'}, {'tk', 'lx'})
    elseif kind == 'archive' then
      archive_task(t, reason or 'failed', err)
    else
      local set = {a = tostring(math.max(0, t.a - 1)), c = '0'}
      t.a = math.max(0, t.a - 1)
      if err then set.le = err end
      if run_at and run_at > NOW then
        t.nr = run_at
        set.nr = f(run_at)
        move(t, 'scheduled', set, {'tk', 'lx'})
      else
        make_pending(t, NOW, set, {})
      end
    end
    applied[i + 1] = '1'
  end
end
return finish(table.concat(applied))
