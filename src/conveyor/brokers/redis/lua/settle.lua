-- settle.lua: apply execution outcomes, each fenced by its lease token (compare-and-set).
-- KEYS: the standard one (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) = n, A(2) = a JSON array of n * 8 strings, per outcome: task id, token, kind
--       (complete|retry|archive|release), result (opt), error (opt), run_at ("" none), reason (opt),
--       keep_for; long results and errors as arguments of their own, A(3) onwards
--       (batch_values() in _lib.lua).
-- Returns: one string, per outcome "1" (applied) or "0" (task missing, not active, or another token
--          holds it; also a second outcome for a task in the same call: the first one ended its lease).
-- Costs: one HMGET of all the rows for the fences; `complete` then rewrites the row's head and the
--   call writes all completed rows with one HSET (and results with one more); the other kinds go
--   through the generic transitions of _lib.lua.
-- Transition: active -> completed (result, keep_until = now + keep_for) | retry (retries + 1, at
--             run_at or now, error recorded) | archived (reason, default failed; error recorded) |
--             pending, or scheduled if run_at > now (release: the attempt is given back).

-- a row's head: s m q (x a c) l ne tk (lx sa fa ku), then where the rest begins (r on): a position,
-- not a capture of the rest, which would read every byte of the body (~10 instructions a byte)
local HEAD = '^(%S+) (%S+) (%S+) (%S+ %S+ %S+) (%S+) (%S+) (%S+) (%S+ %S+) %S+ %S+ ()'

-- each call:
local n = tonumber(A(1))
local V = batch_values()
local ids = {}
for i = 0, n - 1 do ids[i + 1] = V[1 + i * 8] end
local rows = redis.call('HMGET', ROWS, unpack(ids))
local applied, done, writes, results, cleared = {}, {}, {}, {}, {}
local KEEP, qk = {}, {} -- keep_until by keep_for, and per queue its sorted sets' writes (see below)
local unleased, nu = {}, 0
DEFER = true -- no sorted set is read below
for i = 0, n - 1 do
  local b = 1 + i * 8
  local id, token, kind, row = V[b], V[b + 1], V[b + 2], rows[i + 1]
  local s, m, q, xac, l, ne, tk, lxsa, r
  if row and not done[id] then s, m, q, xac, l, ne, tk, lxsa, r = string.match(row, HEAD) end
  if s ~= 'active' or tk ~= token or token == '' then
    applied[i + 1] = '0'
  elseif kind == 'complete' then
    -- active -> completed, the row's head rewritten (what finish_task() would write for this case);
    -- tk, lx and c are left as they were: they mean nothing outside `active` (see codec.py)
    local result, keep = opt(V[b + 3]), V[b + 7]
    local kus = KEEP[keep]
    if not kus then
      kus = f(NOW + tonumber(keep))
      KEEP[keep] = kus
    end
    local k = qk[q] -- its keys, then members left `active`, and pairs for `completed` and its keep
    if not k then
      k = {qkey(q, 'active'), qkey(q, 'completed'), qkey(q, 'completed:keep'), {}, {}, {}, 0}
      qk[q] = k
    end
    writes[#writes + 1] = id
    writes[#writes + 1] = 'completed ' .. m .. ' ' .. q .. ' ' .. xac .. ' 0 ' .. ne .. ' ' .. tk .. ' ' .. lxsa .. ' '
      .. NOWS .. ' ' .. kus .. ' ' .. string.sub(row, r)
    if result then
      results[#results + 1] = id
      results[#results + 1] = result
    end
    if l == '1' then cleared[#cleared + 1] = id end
    local c = k[7]
    k[4][c / 2 + 1] = m
    k[5][c + 1], k[5][c + 2] = NOWS, m
    k[6][c + 1], k[6][c + 2] = kus, m
    k[7] = c + 2
    nu = nu + 1
    unleased[nu] = m
    if EMIT then event(id, 'active', 'completed', q) end
    applied[i + 1] = '1'
  else
    local t = parse(id, row)
    local err, run_at, reason = opt(V[b + 4]), num(V[b + 5]), opt(V[b + 6])
    if kind == 'retry' then
      err = err or 'Retry'
      t.r, t.nr, t.c, t.tk, t.lx = t.r + 1, run_at or NOW, '0', nil, nil
      add_error(t, err)
      move(t, 'retry', err)
    elseif kind == 'archive' then
      archive_task(t, reason or 'failed', err)
    else
      t.a, t.c = math.max(0, t.a - 1), '0'
      if run_at and run_at > NOW then
        t.nr, t.tk, t.lx = run_at, nil, nil
        move(t, 'scheduled', err)
      else
        make_pending(t, NOW, err)
      end
    end
    applied[i + 1] = '1'
  end
  if applied[i + 1] == '1' then done[id] = true end
end
if #writes > 0 then redis.call('HSET', ROWS, unpack(writes)) end
-- the completed tasks' sorted-set writes, one command per key
for _, k in pairs(qk) do
  call_all('ZREM', k[1], k[4], k[7] / 2)
  call_all('ZADD', k[2], k[5], k[7])
  call_all('ZADD', k[3], k[6], k[7])
end
call_all('ZREM', LEASES, unleased, nu)
if #results > 0 then redis.call('HSET', RESULTS, unpack(results)) end
if #cleared > 0 then redis.call('HDEL', LASTERR, unpack(cleared)) end
return finish(table.concat(applied))
