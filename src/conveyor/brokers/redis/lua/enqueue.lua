-- enqueue.lua: store new tasks, atomically for the whole call (one chunk).
-- KEYS: the standard one (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) = n and the n * 10 strings, per task: id, name, queue, payload,
--       priority, run_at ("" none), expires_at ("" none), unique_key (opt), unique_until ("" none), options:
--       for n > 1 as one JSON array in A(2) (cjson decodes it far faster than Redis builds 10n ARGV), for
--       n = 1 as they are in A(2)..A(11) (no JSON to make or to decode for the most common call), where
--       the caller leaves out the trailing ones at their defaults (priority "0", "", options "{}"):
--       each argument costs a one-task call ~0.2 us of server time.
-- Returns: per task "" (stored) or the id of the existing task (duplicate, not stored), as that one
--          string when n = 1; or the error "CONVEYOR_QUEUEFULL <queue> <max_size>" when a queue's max_size
--          would be exceeded (nothing written).
-- Transition: (none) -> pending, or scheduled when run_at > now. A task whose id is taken by an invisible
--             (past keep_until) task replaces it silently.
local function push(list, k, v)
  list[#list + 1] = k
  list[#list + 1] = v
end

-- the id of the task that makes task V[b..] a duplicate (nil: none): its id held by a visible task
-- (old: the task stored under its id, if any), or its unique key held by a task stored earlier in the
-- same call (chunk: unique key -> id) or by an unfinished task within its window
local function duplicate_of(V, b, old, chunk)
  if visible(old) then return V[b] end
  local uk = opt(V[b + 7])
  if not uk then return nil end
  if chunk and chunk[uk] then return chunk[uk] end
  local holder = redis.call('HGET', UNIQ, uk)
  if not holder then return nil end
  local h = redis.call('HMGET', tkey(holder), 's', 'uu')
  local until_ = num(h[2])
  if h[1] and unfinished(h[1]) and until_ and NOW < until_ then return holder end
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

local function register(q) -- settings(q) is cached: read for max_size before
  if not settings(q).known then
    redis.call('SADD', QUEUES, q)
    redis.call('HSET', skey(q), 'kn', '1')
  end
end

-- store task V[b..] under key with sequence number seq (old: an invisible task it replaces)
local function store(V, b, key, seq, old)
  local id, name, q, payload, pr = V[b], V[b + 1], V[b + 2], V[b + 3], tonumber(V[b + 4] or '0')
  local run_at, x, uk, uu, options = num(V[b + 5]), num(V[b + 6]), opt(V[b + 7]), num(V[b + 8]), V[b + 9] or '{}'
  if old then remove_task(old, false) end
  local t = {id = id, q = q, m = string.format('%016d', seq) .. id, pr = pr, ra = NOW, x = x}
  if run_at and run_at > NOW then
    t.s, t.nr = 'scheduled', run_at
  else
    t.s = 'pending'
  end
  -- Fields at their usual value start absent, so the usual task costs one HSET of 7 fields (a field
  -- costs ~0.15 us to write and ~20 bytes to keep): attempts, retries and stalls (read as 0), pr (0),
  -- o ("{}") and ra (read as ea: a task enqueued pending became ready when enqueued). fd is always
  -- written: a worker of an earlier version, sharing the server during a rolling upgrade, reads it
  -- (an unregistered task's grace window starts there). The others go in a second HSET.
  local fd = t.nr and f(t.nr) or NOWS
  redis.call('HSET', key, 'n', name, 'q', q, 'm', t.m, 'p', payload, 'ea', NOWS, 's', t.s, 'fd', fd)
  if t.nr or x or uk or pr ~= 0 or options ~= '{}' then
    local more = {}
    if t.nr then push(more, 'nr', fd) end
    if pr ~= 0 then push(more, 'pr', V[b + 4]) end
    if options ~= '{}' then push(more, 'o', options) end
    if x then push(more, 'x', f(x)) end
    if uk then
      push(more, 'uk', uk)
      if uu then
        push(more, 'uu', f(uu))
        redis.call('HSET', UNIQ, uk, id)
      end
    end
    redis.call('HSET', key, unpack(more))
  end
  index(t)
  event(id, nil, t.s, q)
end

-- each call:
local n = tonumber(A(1))
if n == 1 then -- the most common call: one task, its values in ARGV[6..15], no tables of the chunk's
  local key = tkey(A(2))
  local old = redis.call('EXISTS', key) == 1 and load(A(2)) or nil
  local dup = duplicate_of(ARGV, 6, old)
  if dup then return finish(dup) end
  local full = over_max_size(A(4), 1)
  if full then return full end
  register(A(4))
  store(ARGV, 6, key, redis.call('INCRBY', SEQ, 1), old)
  return finish('')
end
local V = cjson.decode(A(2))
local results, taken, ukeys, adding, stale = {}, {}, {}, {}, {}
-- one EXISTS over the whole chunk: usually no id is taken, and then no task needs a check of its own
local tkeys = {}
for i = 0, n - 1 do tkeys[i + 1] = tkey(V[1 + i * 10]) end
local some_exist = redis.call('EXISTS', unpack(tkeys)) > 0
for i = 0, n - 1 do
  local b = 1 + i * 10
  local id, q, uk = V[b], V[b + 2], opt(V[b + 7])
  local old = nil
  if some_exist and redis.call('EXISTS', tkeys[i + 1]) == 1 then old = load(id) end
  local dup = taken[id] and id or duplicate_of(V, b, old, ukeys)
  if dup then
    results[#results + 1] = dup
  else
    results[#results + 1] = ''
    taken[id] = true
    if old then stale[id] = old end
    if uk then ukeys[uk] = id end
    adding[q] = (adding[q] or 0) + 1
  end
end
local new = 0
for q, count in pairs(adding) do
  local full = over_max_size(q, count)
  if full then return full end
  new = new + count
end
DEFER = true -- no sorted set is read below
local seq = new > 0 and redis.call('INCRBY', SEQ, new) - new or 0
for q, _ in pairs(adding) do register(q) end
for i = 0, n - 1 do
  if results[i + 1] == '' then
    seq = seq + 1
    store(V, 1 + i * 10, tkeys[i + 1], seq, stale[V[1 + i * 10]])
  end
end
return finish(results)
