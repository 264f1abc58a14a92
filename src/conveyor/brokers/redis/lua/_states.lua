-- _states.lua: a task's state: its queue's settings, the sorted sets that index it by state (index(),
-- unindex()), the transitions that move it (move() and the helpers over it) and its removal
-- (remove_task()), with the texts they share with the memory and SQLite brokers.

-- Texts shared with the memory and SQLite brokers (conveyor/brokers/transitions.py; a test checks they
-- match): a task expired before it started, a retry whose outcome gave no error, an expired lease
-- ({stalls}: the task's stall count, this one included).
local EXPIRED_ERROR = 'Expired: its deadline passed before it could run (again)'
local RETRY_ERROR = 'Retry'
local LEASE_EXPIRED_ERROR = 'LeaseExpired: lease expired without an acknowledgement ({stalls} stall(s))'

local function settings(q)
  local s = SETTINGS[q]
  if not s then
    local v = redis.call('HMGET', skey(q), 'ms', 'cc', 'ag', 'pa', 'kn')
    s = {ms = num(v[1]), cc = num(v[2]), ag = num(v[3]), pa = v[4] == '1', known = v[5] == '1'}
    SETTINGS[q] = s
  end
  return s
end

-- base.ready_key(): lower runs first
local function ready_score(pr, ra, ag)
  if ag and ag ~= 0 then return ra - pr * ag end
  return -pr
end

-- n grouped tasks of queue q left `pending`: group g (its `waiting` member) counts n fewer
local function ungroup(q, g, n)
  local groups = qkey(q, 'groups')
  if redis.call('HINCRBY', groups, g, -n) <= 0 then
    redis.call('HDEL', groups, g)
    zop('ZREM', qkey(q, 'waiting'), g)
  end
end

local function unindex(t)
  local q, m, s = t.q, t.m, t.s
  if s == 'pending' then
    zop('ZREM', qkey(q, 'pending'), m)
    if t.g then -- waiting in its enqueue call's group: out of it for good
      ungroup(q, t.g, 1)
      t.g = nil
    else
      zop('ZREM', qkey(q, 'waiting'), m)
    end
    zop('ZREM', EXPIRING, m)
  elseif s == 'scheduled' or s == 'retry' then
    zop('ZREM', qkey(q, s), m)
    zop('ZREM', DUE, m)
    zop('ZREM', EXPIRING, m)
  elseif s == 'active' then
    zop('ZREM', qkey(q, 'active'), m)
    zop('ZREM', LEASES, m)
  elseif s == 'completed' or s == 'archived' then
    zop('ZREM', qkey(q, s), m)
    zop('ZREM', qkey(q, s .. ':keep'), m)
  end
end

local function index(t)
  local q, m, s = t.q, t.m, t.s
  if s == 'pending' then
    WOKEN = true
    local ag = settings(q).ag
    zop('ZADD', qkey(q, 'pending'), (ag and ag ~= 0) and f(t.ra - t.pr * ag) or tostring(-t.pr), m)
    zop('ZADD', qkey(q, 'waiting'), t.ra == NOW and NOWS or f(t.ra), m)
    if t.x then zop('ZADD', EXPIRING, f(t.x), m) end
  elseif s == 'scheduled' or s == 'retry' then
    local nr = f(t.nr)
    zop('ZADD', qkey(q, s), nr, m)
    zop('ZADD', DUE, nr, m)
    if t.x then zop('ZADD', EXPIRING, f(t.x), m) end
    -- due soon: an idle waiter claims and reads the new first due time (claim.lua), later ones it
    -- reads at its claims meanwhile (at least one per poll_interval); a task due later wakes nobody
    if t.nr - NOW < DUE_SOON then WOKEN = true end
  elseif s == 'active' then
    zop('ZADD', qkey(q, 'active'), t.sa == NOW and NOWS or f(t.sa), m)
    zop('ZADD', LEASES, f(t.lx), m)
  else
    zop('ZADD', qkey(q, s), t.fa == NOW and NOWS or f(t.fa), m)
    zop('ZADD', qkey(q, s .. ':keep'), f(t.ku), m)
  end
end

-- move t to state s (t's fields already updated) and write its row; le: its new last error, if any
-- (only `complete` clears one, in settle.lua; the row records whether there is one)
local function move(t, s, le)
  unindex(t)
  local old = t.s
  t.s = s
  if le then
    redis.call('HSET', LASTERR, t.id, le)
    t.l = true
  end
  save(t)
  index(t)
  if old ~= s then event(t.id, old, s, t.q) end
end

local function add_error(t, err)
  redis.call('RPUSH', ekey(t.id), f(t.a) .. '\t' .. NOWS .. '\t' .. err)
  redis.call('LTRIM', ekey(t.id), -max_errors(), -1)
  t.ne = true
end

-- tk, lx and c mean something only while active and nr only while scheduled/retry: transitions out
-- of those states leave them as they were only on the hot paths (claim, settle); these clear them
local function make_pending(t, ra, le)
  t.ra, t.nr, t.tk, t.lx = ra, nil, nil, nil
  move(t, 'pending', le)
end

-- tk: what the row keeps in its lease token's place (nil none; a settle's token: settle.lua)
local function finish_task(t, s, keep_for, le, tk)
  t.fa, t.ku, t.c, t.nr, t.tk, t.lx = NOW, NOW + keep_for, '0', nil, tk, nil
  move(t, s, le)
end

local function archive_task(t, reason, err, tk)
  t.ar = reason
  if err then add_error(t, err) end
  finish_task(t, 'archived', retention(), err, tk)
end

-- remove task t; `kept`: the unique key of a task that replaces it under its id ("" none), whose
-- entries (the key, the id) may be the ones t had. Freeing t's entries in the namespace slot: where
-- the call declares it (layout 4), its unique key here; else the caller frees the lines of FREED
-- (release.lua): its unique key, and, in a labelled slot (split slots), its custom id's entry in
-- `ids` (a generated id, "<hex>~<label>", has none)
local function remove_task(t, report, kept)
  unindex(t)
  redis.call('HDEL', ROWS, t.id)
  redis.call('HDEL', RESULTS, t.id)
  if t.l then redis.call('HDEL', LASTERR, t.id) end
  if t.ne then
    redis.call('DEL', ekey(t.id))
    redis.call('HDEL', LIMITS, t.id)
    redis.call('HDEL', TRACEBACKS, t.id)
  end
  if LABEL and not kept and not string.find(t.id, '~', 1, true) then
    FREED = FREED or {}
    FREED[#FREED + 1] = 'i ' .. t.id .. ' ' .. LABEL
  end
  if t.uk and t.uk ~= kept then
    if not UNIQ then -- a call without the namespace slot: the caller frees it there (release.lua)
      FREED = FREED or {}
      FREED[#FREED + 1] = 'u ' .. t.uk .. ' ' .. t.id
    elseif entry_names(redis.call('HGET', UNIQ, t.uk), t.id) then
      redis.call('HDEL', UNIQ, t.uk)
    end
  end
  if report then event(t.id, t.s, 'deleted', t.q) end
end
