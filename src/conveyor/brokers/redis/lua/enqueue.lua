-- enqueue.lua: store new tasks, atomically for the whole call (one chunk).
-- KEYS: the queue slot's, and in layout 4 (one slot) also the namespace slot's (_call.lua): a new queue
--       joins QUEUES, unique keys are checked and claimed in UNIQ. A call without the namespace slot
--       refuses, before any write, with the error CONVEYOR_NAMESPACE and the names and forget counters
--       of the queues not yet registered (see register() below); its tasks' unique keys were claimed
--       by the caller beforehand (take.lua), so it checks them only within the call, and a unique key
--       it frees (an invisible task replaced) is returned for release.lua.
-- ARGV: head (_call.lua) with the call's token, then A(1) = n, or n + SPAN * step, or "<n> <step> <back
--       1> .. <back n>" (the numbers of the call's tasks: see numbers() below), and the n * 8
--       strings, per task: id,
--       queue, body (name, options and payload, made by the caller: codec.encode_body), priority,
--       run_at ("" none), expires_at
--       ("" none), unique_key (opt; escaped by the caller: no whitespace), unique_until ("" none): for
--       n > 1 as one JSON array in A(2) (cjson decodes it far faster than Redis builds 8n ARGV; long
--       bodies as arguments of their own, A(3) onwards: batch_values() in _call.lua), for
--       n = 1 as they are in A(2)..A(9) (no JSON to make or to decode for the most common call), where
--       the caller leaves out the trailing ones at their defaults (priority "0", then ""): each
--       argument costs a one-task call server time. On one server, A(1) = "" starts a call over
--       several queue slots, each slot's chunk in the batch form (see joined() below).
-- Returns: one string: "" when every task was stored, else per task "" (stored) or the id of the
--          existing task (duplicate, not stored), joined by newlines (ids hold none); or the error
--          "CONVEYOR_QUEUEFULL <queue> <max_size>" when a queue's max_size would be exceeded (nothing
--          written). A call sent again (its connection lost before the reply was read) answers as
--          its first send did, if that one ran, and writes nothing (repeated() in _resend.lua): it never
--          meets its own tasks as duplicates. A call over several slots answers as joined() says.
-- Transition: (none) -> pending, or scheduled when run_at > now. A task whose id is taken by an invisible
--             (past keep_until) task replaces it silently.

-- the id of the task that makes task V[b..] a duplicate (nil: none): its id held by a visible task
-- (old: the task stored under its id, if any), or its unique key held by a task stored earlier in the
-- same call (chunk: unique key -> id) or by an unfinished task within its window
local function duplicate_of(V, b, old, chunk)
  if visible(old) then return V[b] end
  local uk = opt(V[b + 6])
  if not uk then return nil end
  if chunk and chunk[uk] then return chunk[uk] end
  if not UNIQ then return nil end -- claimed by the caller (take.lua)
  local holder = redis.call('HGET', UNIQ, uk)
  if not holder then return nil end
  local h = load(holder)
  if h and unfinished(h.s) and h.uu and NOW < h.uu then return holder end
  return nil
end

-- the QUEUEFULL error if `count` more tasks would take queue q past its max_size, else nil
local function over_max_size(q, count)
  local ms = settings(q).ms
  if not ms then return nil end
  local size = redis.call('ZCARD', qkey(q, 'pending')) + redis.call('ZCARD', qkey(q, 'scheduled'))
    + redis.call('ZCARD', qkey(q, 'retry')) + redis.call('ZCARD', qkey(q, 'active'))
  if size + count > ms then return redis.error_reply('CONVEYOR_QUEUEFULL ' .. q .. ' ' .. ms) end
  return nil
end

-- A queue whose `kn` is unset joins the registry (namespace slot). With QUEUES (the call declares the
-- namespace slot) the SADD is here; without, the call is refused, before any write, with
-- "CONVEYOR_NAMESPACE" and, per such queue, its name and forget counter `fc` (forget_queue.lua): the
-- broker SADDs them and sends the call again with those pairs after the events flag in ARGV[3] (see
-- _call.lua), which stand for the SADD only while `fc` is unchanged (no forget began or ended since the
-- refusal, so no forget's SREM can have undone it). A queue a forget is taking out of the registry
-- holds the mark `fg`: while it holds, the queue is added again on every call and `kn` stays unset,
-- since the forget's SREM may still come after the SADD; a mark past its deadline (its forget died
-- between its steps) is taken over.
local PROVEN = nil -- queue -> forget counter, from ARGV[3] (read at the first use per call)

local function proven(q)
  if #ARGV[3] < 2 then return false end
  if not PROVEN or PROVEN[0] ~= ARGV then
    PROVEN = {[0] = ARGV}
    for name, count in string.gmatch(string.sub(ARGV[3], 3), '(%S+) (%S+)') do PROVEN[name] = count end
  end
  local count = PROVEN[q]
  return count ~= nil and count == (redis.call('HGET', skey(q), 'fc') or '0')
end

-- the refusal for the queues of `names` (a list) whose registration the caller must make first
local function unregistered(names)
  local parts = {'CONVEYOR_NAMESPACE'}
  for _, q in ipairs(names) do
    parts[#parts + 1] = q .. ' ' .. (redis.call('HGET', skey(q), 'fc') or '0')
  end
  return redis.error_reply(table.concat(parts, ' '))
end

local function register(q) -- settings(q) is cached: read for max_size before
  if not settings(q).known then
    if QUEUES then redis.call('SADD', QUEUES, q) end
    local fg = redis.call('HGET', skey(q), 'fg')
    if fg then
      local t = redis.call('TIME')
      if tonumber(fg) > tonumber(t[1]) + tonumber(t[2]) / 1000000 then return end
      redis.call('HDEL', skey(q), 'fg')
    end
    redis.call('HSET', skey(q), 'kn', '1')
  end
end

-- m for sequence number seq (the zero-padded sequence, then the id)
local function member(seq, id) return string.format('%016d', seq) .. id end

-- Sequence numbers in the enqueue order of the caller over every slot. A call moves its slot's `seq`
-- by n (its tasks', a duplicate's number left unused) and its i-th task gets the i-th number, so a
-- caller can tell what its calls leave there. One whose previous call went elsewhere moves it by a
-- `step` instead (A(1) = n + SPAN * step: one number, which a one-task call reads as cheaply as n),
-- past the numbers it gave elsewhere meanwhile, and the call's tasks get the last n numbers; where
-- its tasks of this slot are not neighbours in its order it sends "<n> <step> <back> ..." and the
-- i-th gets the new top minus its back, or "<n> <step> *<stride>" where they are evenly spaced (a
-- partitioned queue's generated ids go to its partitions in rotation): back i = stride * (n - i),
-- no number per task to read. The upkeep over several slots, which breaks ties of time by
-- member, then takes them in the order of the caller's calls, as memory:// takes them by its one
-- sequence (spend() in _upkeep.lua; exact for one broker object's calls: producing.py).
local SPAN = 1024 -- more than the tasks of a call (calls.ENQUEUE_CHUNK; a test checks)
local STRIDE = 42 -- "*", before the stride of evenly spaced places
-- A(1): n, the step (nil: n) and the backs (nil: n - i)
local function numbers()
  local a1 = tonumber(A(1))
  if a1 then
    if a1 < SPAN then return a1, nil, nil end
    local n = a1 % SPAN
    return n, (a1 - n) / SPAN, nil
  end
  local count, step, rest = string.match(A(1), '^(%d+) (%d+) (.*)$')
  local backs = {}
  if string.byte(rest) == STRIDE then -- "*<stride>": the backs of places evenly spaced, no list to read
    local n, stride = tonumber(count), tonumber(string.sub(rest, 2))
    for i = 1, n do backs[i] = stride * (n - i) end
    return n, tonumber(step), backs
  end
  for b in string.gmatch(rest, '%d+') do backs[#backs + 1] = tonumber(b) end
  return tonumber(count), tonumber(step), backs
end

-- The tail of a new task's row (new_tail, _rows.lua): fa ("-" or the task's group), priority, enqueued,
-- first due and ready at now (first due: its next run if scheduled), next run ("-" or formatted),
-- unique_until, unique key. Numbers are formatted here, not copied: a row's fields must not hold spaces.
local function row_tail(pr, nr, uu, uk, fa)
  return new_tail(fa or '-', pr == 0 and '0' or f(pr), NOWS, nr == '-' and NOWS or nr, NOWS, nr,
    uu and f(uu) or '-', uk and '=' .. uk or '-')
end

-- task V[b..] as stored, with sequence number seq; its row goes to `rows` (id, row pairs), which the
-- caller writes (old: an invisible task it replaces)
local function store(V, b, seq, old, rows)
  local id, q, pr = V[b], V[b + 1], V[b + 3]
  local run_at, x, uk, uu = num(V[b + 4]), num(V[b + 5]), opt(V[b + 6]), num(V[b + 7])
  if old then remove_task(old, false, uu and uk or '') end
  local t = {id = id, q = q, m = member(seq, id), pr = pr and tonumber(pr) or 0, ra = NOW, x = x}
  local nr = '-'
  if run_at and run_at > NOW then
    t.s, t.nr = 'scheduled', run_at
    nr = f(run_at)
  else
    t.s = 'pending'
  end
  local n = #rows
  rows[n + 1], rows[n + 2] = id, new_row(t.s, t.m, q, x, row_tail(t.pr, nr, uu, uk), V[b + 2])
  if uk and uu and UNIQ then redis.call('HSET', UNIQ, uk, id) end
  index(t)
  event(id, nil, t.s, q)
end

-- The plain task: no unique key, not scheduled, its id free. store() and index() for it, written out
-- (their generality was most of a batch task's cost; docs/performance-notes.md).
-- Its row is the one store() makes, its tail the same for every plain task of a priority in a call,
-- and so is its pending score (aging: ready_at - priority * aging, ready_at = now): plain_kind()
-- builds both once per priority. Several in one call wait in the call's group (see _rows.lua): its
-- member, grouped, goes in row field fa.
local function plain_score(q, pr)
  local ag = settings(q).ag
  return (ag and ag ~= 0) and f(NOW - pr * ag) or tostring(-pr)
end
local function plain_kind(q, prt, grouped)
  local pr = tonumber(prt) or 0
  return {row_tail(pr, '-', nil, nil, grouped), plain_score(q, pr)}
end

-- The chunk of n tasks of A(1).. (A(2) their JSON array: batch_values()) stored in the current slot,
-- checked before its first write: its result ("" when every task was stored, else per task "" or the
-- id it duplicates, joined by newlines), or the refusal (an error reply) with nothing written.
local function store_batch(n, step, backs)
  local V = batch_values()
  local results, taken, ukeys, adding, stale = {}, {}, {}, {}, {}
  local dups = false
  local ids = {}
  for i = 0, n - 1 do ids[i + 1] = V[1 + i * 8] end
  local existing_rows = redis.call('HMGET', ROWS, unpack(ids)) -- usually none: no id is taken
  for i = 1, n do
    local b = i * 8 - 7
    local id, q, row = V[b], V[b + 1], existing_rows[i]
    if not row and V[b + 6] == '' and not taken[id] then -- a new id without a unique key: no duplicate
      results[i] = ''
      taken[id] = true
    else
      local uk, old = opt(V[b + 6]), parse(id, row or nil)
      local dup = taken[id] and id or duplicate_of(V, b, old, ukeys)
      if dup then
        results[i] = dup
        dups = true
      else
        results[i] = ''
        taken[id] = true
        if old then stale[id] = old end
        if uk then ukeys[uk] = id end
      end
    end
    if results[i] == '' then adding[q] = (adding[q] or 0) + 1 end
  end
  if not QUEUES then
    local missing = {}
    for q, _ in pairs(adding) do
      if not settings(q).known and not proven(q) then missing[#missing + 1] = q end
    end
    if #missing > 0 then return unregistered(missing) end
  end
  for q, count in pairs(adding) do
    local full = over_max_size(q, count)
    if full then return full end
  end
  DEFER = true -- no sorted set is read below
  local top = redis.call('INCRBY', SEQ, step or n) -- task i's number: top - n + i, or top - backs[i]
  for q, _ in pairs(adding) do register(q) end
  local rows = {}
  -- plain tasks' writes, one command per key: per queue the count of its tasks in this call's group
  -- (they wait as one `waiting` member), and per queue and priority (a kind) its `pending` pairs
  -- (kind[3] the key, kind[4] the pairs, kind[5] their count)
  local kinds, grouped, expiring, nx = {}, {}, {}, 0
  local group = 'g' .. NOWS -- this call's `waiting` member for its plain tasks
  for i = 1, n do
    if results[i] == '' then
      local seq = backs and top - backs[i] or top - n + i
      local b = i * 8 - 7
      local id, q, stale_ = V[b], V[b + 1], stale[V[b]]
      local uk = V[b + 6]
      if stale_ or (uk ~= '' and UNIQ) or (V[b + 4] ~= '' and tonumber(V[b + 4]) > NOW) then
        store(V, b, seq, stale_, rows)
      else -- plain (see plain_kind), written as store() and index() would write it; with a unique key
        -- the caller claimed (no UNIQ: take.lua) too, its row's tail its own
        local byp = kinds[q]
        if not byp then
          byp = {}
          kinds[q], grouped[q] = byp, 0
        end
        local prt = V[b + 3]
        local kind = byp[prt]
        if not kind then
          kind = plain_kind(q, prt, group)
          kind[3], kind[4], kind[5] = qkey(q, 'pending'), {}, 0
          byp[prt] = kind
        end
        local m, x = member(seq, id), num(V[b + 5])
        local tail = uk == '' and kind[1] or row_tail(tonumber(prt) or 0, '-', num(V[b + 7]), opt(uk), group)
        local r = #rows
        rows[r + 1], rows[r + 2] = id, new_row('pending', m, q, x, tail, V[b + 2])
        local c = kind[5]
        kind[4][c + 1], kind[4][c + 2], kind[5] = kind[2], m, c + 2
        grouped[q] = grouped[q] + 1
        if x then
          expiring[nx + 1], expiring[nx + 2], nx = f(x), m, nx + 2
        end
        WOKEN = true
        if EMIT then event(id, nil, 'pending', q) end
      end
    end
  end
  if #rows > 0 then redis.call('HSET', ROWS, unpack(rows)) end
  flush_z() -- store()'s sorted-set writes first: none may undo the group's below
  for q, byp in pairs(kinds) do
    for _, kind in pairs(byp) do call_all('ZADD', kind[3], kind[4], kind[5]) end
    redis.call('HINCRBY', qkey(q, 'groups'), group, grouped[q])
    redis.call('ZADD', qkey(q, 'waiting'), NOWS, group)
  end
  call_all('ZADD', EXPIRING, expiring, nx)
  -- one string, not a table of n (converting a table reply costs the server per element)
  return dups and table.concat(results, '\n') or ''
end

-- A call over the queue slots of several partitions or queues on one server, which checks no slots
-- (fanout.py): A(1) = "", then per slot the arguments of its chunk as a call of that slot alone
-- would send them in the batch form (A(1) numbers, A(2) the JSON array, A(3) the places of the long
-- bodies, "" if none, and those bodies), each slot after the first introduced by its `seq` key. Each
-- slot's part is checked and stored in its turn, as that call would be. Returns "" when every task
-- was stored, else "<parts stored>" and, if a part was refused, a space and the refusal's text, then
-- the stored parts' results per task, each on a line of its own; a refusal of the first part is
-- returned as it is (nothing written). The caller goes on slot by slot from a refused part.
local function joined()
  local first, lines, parts, dups = SENTP, {}, 0, false
  BASE = BASE + 1
  while true do
    local n, step, backs = numbers()
    local out = store_batch(n, step, backs)
    if type(out) ~= 'string' then
      if parts == 0 then return forget_sent(out) end
      SENTP = first -- the call's answer is kept where repeated() looks for it
      return finish(parts .. ' ' .. out.err .. '\n' .. table.concat(lines, '\n'), true)
    end
    parts = parts + 1
    if out ~= '' then dups = true end
    lines[parts] = out ~= '' and out or string.rep('\n', n - 1)
    local k = 4 -- the next slot's `seq`: after A(3) and the long bodies it places
    for _ in string.gmatch(A(3), '%d+') do k = k + 1 end
    local seq = A(k)
    if not seq then break end
    switch(seq)
    BASE, SETTINGS, DEFER = BASE + k, {}, false -- a partition's settings are its own (its share)
  end
  SENTP = first
  if not dups then return finish('', true) end
  return finish(parts .. '\n' .. table.concat(lines, '\n'), true)
end

-- each call:
local kept = repeated()
if kept then return kept end
if A(1) == '' then return joined() end
local n, step, backs = tonumber(A(1)), nil, nil
if not n or n >= SPAN then n, step, backs = numbers() end
if n == 1 then -- the most common call: one task, its values in A(2)..A(9), no tables of the chunk's
  local id, q = A(2), A(3)
  if not QUEUES and not settings(q).known and not proven(q) then return forget_sent(unregistered({q})) end
  -- plain, and room for it (a full queue's refusal comes after the duplicate check, below); a task
  -- with a unique key is plain too where the caller claimed its key (no UNIQ: take.lua), its row then
  -- carrying the key and its unique_until
  local seq, uk = nil, A(8) or ''
  if (A(6) or '') == '' and (uk == '' or not UNIQ) and not over_max_size(q, 1) then
    -- its row is written with HSETNX, which is also the check that its id is free (one command
    -- less); an id in use (a duplicate, or an invisible task to replace) takes the general path below,
    -- which reads the task there and stores it with this number
    seq = redis.call('INCRBY', SEQ, step or 1)
    local m, x = member(seq, id), num(A(7))
    local tail, score
    if uk == '' then
      local kind = plain_kind(q, A(5) or '0')
      tail, score = kind[1], kind[2]
    else -- its tail its own (plain_kind()'s would be made for nothing)
      local pr = tonumber(A(5)) or 0
      tail, score = row_tail(pr, '-', num(A(9)), opt(uk)), plain_score(q, pr)
    end
    if redis.call('HSETNX', ROWS, id, new_row('pending', m, q, x, tail, A(4))) == 1 then
      register(q)
      redis.call('ZADD', qkey(q, 'pending'), score, m)
      redis.call('ZADD', qkey(q, 'waiting'), NOWS, m)
      if x then redis.call('ZADD', EXPIRING, f(x), m) end
      WOKEN = true
      if EMIT then event(id, nil, 'pending', q) end
      return finish('', true)
    end
  end
  local old = load(id)
  local dup = duplicate_of(ARGV, BASE + 2, old)
  if dup then
    if not seq then redis.call('INCRBY', SEQ, step or 1) end -- its number, unused (see numbers())
    return finish(dup, true)
  end
  local full = over_max_size(q, 1)
  if full then return forget_sent(full) end
  register(q)
  local rows = {}
  store(ARGV, BASE + 2, seq or redis.call('INCRBY', SEQ, step or 1), old, rows)
  redis.call('HSET', ROWS, rows[1], rows[2])
  return finish('', true)
end
local out = store_batch(n, step, backs)
if type(out) ~= 'string' then return forget_sent(out) end
return finish(out, true)
