-- enqueue.lua: store new tasks, atomically for the whole call (one chunk).
-- KEYS: the standard set (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) = n and the n * 10 strings, per task: id, name, queue, payload,
--       priority, run_at ("" none), expires_at ("" none), unique_key (opt), unique_until ("" none), options:
--       for n > 1 as one JSON array in A(2) (cjson decodes it far faster than Redis builds 10n ARGV), for
--       n = 1 as they are in A(2)..A(11) (no JSON to make or to decode for the most common call).
-- Returns: per task "" (stored) or the id of the existing task (duplicate, not stored), as that one
--          string when n = 1; or the error "CONVEYOR_QUEUEFULL <queue> <max_size>" when a queue's max_size
--          would be exceeded (nothing written).
-- Transition: (none) -> pending, or scheduled when run_at > now. A task whose id is taken by an invisible
--             (past keep_until) task replaces it silently.
local function push(list, k, v)
  list[#list + 1] = k
  list[#list + 1] = v
end
local n = tonumber(A(1))
local V = n == 1 and {unpack(ARGV, 9, 18)} or cjson.decode(A(2)) -- ARGV[9..18] = A(2)..A(11)
local results, taken, ukeys, adding, stale = {}, {}, {}, {}, {}
-- one EXISTS over the whole chunk: usually no id is taken, and then no task needs a check of its own
local tkeys = {}
for i = 0, n - 1 do tkeys[i + 1] = tkey(V[1 + i * 10]) end
local some_exist = redis.call('EXISTS', unpack(tkeys)) > 0
for i = 0, n - 1 do
  local b = 1 + i * 10
  local id, q, uk = V[b], V[b + 2], opt(V[b + 7])
  local dup = nil
  local old = nil
  if some_exist and redis.call('EXISTS', tkeys[i + 1]) == 1 then old = load(id) end
  if taken[id] or visible(old) then
    dup = id
  elseif uk then
    if ukeys[uk] then
      dup = ukeys[uk]
    else
      local holder = redis.call('HGET', UNIQ, uk)
      if holder then
        local h = redis.call('HMGET', tkey(holder), 's', 'uu', 'ku')
        local until_ = num(h[2])
        if h[1] and unfinished(h[1]) and until_ and NOW < until_ then dup = holder end
      end
    end
  end
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
for q, count in pairs(adding) do
  local ms = settings(q).ms
  if ms then
    local size = redis.call('ZCARD', qkey(q, 'pending')) + redis.call('ZCARD', qkey(q, 'scheduled'))
      + redis.call('ZCARD', qkey(q, 'retry')) + redis.call('ZCARD', qkey(q, 'active'))
    if size + count > ms then return redis.error_reply('CONVEYOR_QUEUEFULL ' .. q .. ' ' .. ms) end
  end
end
DEFER = n > 1 -- no sorted set is read below (one task: nothing to batch, so no buffering either)
local new = 0
for _, count in pairs(adding) do new = new + count end
local seq = new > 0 and redis.call('INCRBY', SEQ, new) - new or 0
for q, _ in pairs(adding) do -- settings(q) is cached: read for max_size above
  if not settings(q).known then
    redis.call('SADD', QUEUES, q)
    redis.call('HSET', skey(q), 'kn', '1')
  end
end
for i = 0, n - 1 do
  if results[i + 1] == '' then
    local b = 1 + i * 10
    local id, name, q, payload, pr = V[b], V[b + 1], V[b + 2], V[b + 3], tonumber(V[b + 4])
    local run_at, x, uk, uu, options = num(V[b + 5]), num(V[b + 6]), opt(V[b + 7]), num(V[b + 8]), V[b + 9]
    if stale[id] then remove_task(stale[id], false) end
    seq = seq + 1
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
    redis.call('HSET', tkeys[i + 1], 'n', name, 'q', q, 'm', t.m, 'p', payload, 'ea', NOWS, 's', t.s, 'fd', fd)
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
      redis.call('HSET', tkeys[i + 1], unpack(more))
    end
    index(t)
    event(id, nil, t.s, q)
  end
end
if n == 1 then return finish(results[1]) end
return finish(results)
