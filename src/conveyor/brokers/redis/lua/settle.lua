-- settle.lua: apply execution outcomes, each fenced by its lease token (compare-and-set).
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) = n, A(2) = a JSON array of n * 8 strings,
--       per outcome: task id, token, kind
--       (complete|retry|archive|release), result (opt), error (opt), run_at ("" none), reason (opt),
--       keep_for (complete) or the retry limit the execution ran with (retry, archive: "" none; kept in
--       LIMITS for a task with failures), then for retry and archive optionally "\n" and the traceback of
--       the failed execution (kept in TRACEBACKS; a failure without one deletes the task's entry: it
--       belongs to the latest failure only); long results, errors and last values as arguments of their
--       own, A(3) onwards (batch_values() in _call.lua).
-- Returns: one string, per outcome "1" (applied) or "0" (task missing, not active, or another token
--          holds it; also a second outcome for a task in the same call: the first one ended its lease).
--          A call sent again (its connection lost before the reply was read) answers as its first
--          send did, if that one ran, its events included, and writes nothing. An outcome applied
--          leaves the call's token in its row's tk (meaningless outside `active`, never a lease's):
--          a repeat finds it there while the row is as the outcome left it. Where that may change
--          within the resend window (a release: pending, claimable at once; a retry due sooner; a
--          completion or an archiving kept for less: deleted), the first send also keeps its answer
--          (finish(), the key of repeated() in _resend.lua), which a repeat reads when an outcome finds
--          neither its lease nor the token (sent_answer()).
-- Counts: each applied outcome but `release` adds one to its minute's counters (conveyor/history.py):
--   field "<c|r|a>:<queue>" (completed, retried, archived) of hash P h:<floor(now / 60)>, one HINCRBY per
--   field the call touched; a hash gets its expiry (HISTORY_TTL) when a call creates one of its fields.
-- Costs: one HMGET of all the rows for the fences; `complete` then rewrites the row's head and the
--   call writes all completed rows with one HSET (and results with one more); the other kinds go
--   through the generic transitions of _states.lua.
--   A completion whose keep_until would be now or earlier deletes the task instead (remove_task, unreported;
--   the event says `completed`), as the memory and SQLite brokers do (transitions.deleted_at_settle).
-- Transition: active -> completed (result, keep_until = now + keep_for) | retry (retries + 1, at
--             run_at or now, error recorded) | archived (reason, default failed; error recorded) |
--             pending, or scheduled if run_at > now (release: the attempt is given back).

-- a row's head: SETTLE_HEAD (_rows.lua, next to ROW)
-- a minute's counters outlive the 24 h that reads reach (history.KEEP_MINUTES) by two minutes
local HISTORY_TTL = 24 * 3600 + 120
local COUNTER = {complete = 'c:', retry = 'r:', archive = 'a:'}
-- the counters' key of a minute, by namespace prefix: a pure function of both, built once a minute
local MINUTE_KEYS = {}
local function minute_key(minute)
  local known = MINUTE_KEYS[P]
  if not known or known[1] ~= minute then
    known = {minute, P .. 'h:' .. string.format('%d', minute)}
    MINUTE_KEYS[P] = known
  end
  return known[2]
end

-- each call:
local n = tonumber(A(1))
local V = batch_values()
local ids = {}
for i = 0, n - 1 do ids[i + 1] = V[1 + i * 8] end
local rows = redis.call('HMGET', ROWS, unpack(ids))
local again, fragile, asked = nil, false, false -- a repeat's events; keep the answer; sent_answer() read
local applied, done, writes, results, cleared = {}, {}, {}, {}, {}
local KEEP, qk = {}, {} -- keep_until by keep_for, and per queue its sorted sets' writes (see below)
local unleased, nu = {}, 0
local limits = {} -- task id, retry limit: pairs for one HSET
local traces, untraced = {}, {} -- task id, traceback: pairs for one HSET; ids for one HDEL
-- the counters: the first outcome's kind and queue and how many share both, the others' by counter field
-- in `more` (a table only when a call needs one: most calls count one kind of one queue)
local kind1, q1, n1, more = nil, nil, 0, nil
DEFER = true -- no sorted set is read below
for i = 0, n - 1 do
  local b = 1 + i * 8
  local id, token, kind, row = V[b], V[b + 1], V[b + 2], rows[i + 1]
  local s, m, q, xac, l, ne, tk, lxsa, r
  if row and not done[id] then s, m, q, xac, l, ne, tk, lxsa, r = string.match(row, SETTLE_HEAD) end
  if s ~= 'active' or tk ~= token or token == '' then
    if tk == TOKEN then -- applied by a send of this call that ran before: its row as it left it
      again = again or {}
      again[#again + 1] = id .. '\tactive\t' .. s .. '\t' .. q
      applied[i + 1] = '1'
    else
      if not asked then -- a repeat whose rows may not show it?
        local kept = sent_answer()
        if kept then return kept end
        asked = true
      end
      applied[i + 1] = '0'
    end
  elseif kind == 'complete' and NOW + tonumber(V[b + 7]) <= NOW then
    -- completed without retention (transitions.deleted_at_settle): deleted here, reported completed only
    remove_task(parse(id, row), false)
    event(id, 'active', 'completed', q)
    fragile = true
    applied[i + 1] = '1'
  elseif kind == 'complete' then
    -- active -> completed, the row's head rewritten (what finish_task() would write for this case);
    -- lx and c are left as they were: they mean nothing outside `active` (see codec.py); tk holds the
    -- call's token (see the header)
    local result, keep = opt(V[b + 3]), V[b + 7]
    local kus = KEEP[keep]
    if not kus then
      local kept_for = tonumber(keep)
      kus = f(NOW + kept_for)
      KEEP[keep] = kus
      if kept_for * 1000 < policy(4) then fragile = true end -- deleted within the resend window
    end
    local k = qk[q] -- its keys, then members left `active`, and pairs for `completed` and its keep
    if not k then
      k = {qkey(q, 'active'), qkey(q, 'completed'), qkey(q, 'completed:keep'), {}, {}, {}, 0}
      qk[q] = k
    end
    writes[#writes + 1] = id
    writes[#writes + 1] = 'completed ' .. m .. ' ' .. q .. ' ' .. xac .. ' 0 ' .. ne .. ' ' .. TOKEN .. ' ' .. lxsa .. ' '
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
      err = err or RETRY_ERROR
      t.r, t.nr, t.c, t.tk, t.lx = t.r + 1, run_at or NOW, '0', TOKEN, nil
      add_error(t, err)
      move(t, 'retry', err)
      if (t.nr - NOW) * 1000 < policy(4) then fragile = true end -- promoted, claimed again
    elseif kind == 'archive' then
      archive_task(t, reason or 'failed', err, TOKEN)
      if retention() * 1000 < policy(4) then fragile = true end
    else
      fragile = true -- pending, or scheduled: claimed again
      t.a, t.c = math.max(0, t.a - 1), '0'
      if run_at and run_at > NOW then
        t.nr, t.tk, t.lx = run_at, nil, nil
        move(t, 'scheduled', err)
      else
        make_pending(t, NOW, err)
      end
    end
    if kind == 'retry' or (kind == 'archive' and err) then -- kept with the failures
      local limit, trace = string.match(V[b + 7], '^([^\n]*)\n?(.*)$')
      if limit ~= '' then
        limits[#limits + 1] = id
        limits[#limits + 1] = limit
      end
      if trace ~= '' then
        traces[#traces + 1] = id
        traces[#traces + 1] = trace
      else
        untraced[#untraced + 1] = id
      end
    end
    applied[i + 1] = '1'
  end
  if applied[i + 1] == '1' then
    done[id] = true
    if not kind1 and COUNTER[kind] then kind1, q1 = kind, q end
    if kind == kind1 and q == q1 then
      n1 = n1 + 1
    elseif COUNTER[kind] then
      local field = COUNTER[kind] .. q
      more = more or {}
      more[field] = (more[field] or 0) + 1
    end
  end
end
if again then return answer_again(table.concat(applied), table.concat(again, '\n')) end -- a repeat
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
if #limits > 0 then redis.call('HSET', LIMITS, unpack(limits)) end
if #traces > 0 then redis.call('HSET', TRACEBACKS, unpack(traces)) end
if #untraced > 0 then redis.call('HDEL', TRACEBACKS, unpack(untraced)) end
if kind1 then
  local key = minute_key(math.floor(NOW / 60))
  local fresh = redis.call('HINCRBY', key, COUNTER[kind1] .. q1, n1) == n1
  if more then
    for field, n in pairs(more) do
      if redis.call('HINCRBY', key, field, n) == n then fresh = true end
    end
  end
  if fresh then redis.call('EXPIRE', key, HISTORY_TTL) end
end
return finish(table.concat(applied), fragile)
