-- _call.lua: the head of every call: the KEYS and ARGV each operation gets, the per-call state begin()
-- sets, the helpers over them, and how a call ends (finish(); switch() between slots). scripts.py
-- builds one Redis Functions library from the helper files (code only, no values; scripts.LIBRARY, this
-- one first) and the operation files (each becomes a function `conveyor_<version>_<op>`), loaded once
-- per server: the helpers are built at load time, not on every call.
--
-- KEYS[1]: the `seq` counter of the call's *queue slot* (keys.Slot.declared), which Python chooses per
-- call from the queue (keys.Keys.queue_prefix) or the task id (task_prefix) the call is about. Every key
-- of that slot is built from its prefix P ("{ns}:v4:" in layout 4, where every queue of a namespace
-- shares it; "{ns|label}:v5:" in layout 5, docs/architecture.md), with the names keys.py gives them (a
-- test checks they match, and another that a call touches no key outside the slots it declares).
-- KEYS[2], declared only by an enqueue in layout 4 (one slot): the `queues` registry of the *namespace
-- slot* (keys.Keys.queues), whose prefix gives QUEUES and UNIQ; without it both are nil (with split
-- slots the broker claims unique keys and registers queues in calls of their own; on one server a
-- take joined to its enqueue, take_enqueue.lua, declares it too and runs the enqueue without it).
-- `seq`, not another, because it always exists once the slot holds anything (the first enqueue or
-- `configure` makes it; nothing deletes it): while a cluster migrates the slot, the source node runs a
-- call as long as the declared key is still there and sends it to the target (ASK) once it is gone, so
-- a slot moved whole (all its keys in one MIGRATE) is never seen half-moved (a `due` zset, deleted when
-- empty, sent calls to the target while the data was still on the source). Declaring them all would
-- cost every call server time per argument (docs/performance-notes.md). The keys (see keys.py for
-- their types), all of the queue slot but QUEUES and UNIQ:
--   DUE       scheduled + retry tasks by next_run_at     LEASES    active tasks by lease_expires_at
--   EXPIRING  pending/scheduled/retry by expires_at      SEQ       enqueue counter
--   QUEUES    known queue names (namespace slot)         UNIQ      unique_key -> holder task id (namespace slot)
--   CHANNEL   pub/sub channel of transitions             WAKE      one token, pushed when a call made
--                                                                  tasks pending or due within DUE_SOON
--                                                                  (idle workers BLPOP it)
--   LISTENING exists while some process listens on the events channel (a TTL its listener keeps
--             refreshing); without it and without ARGV[3], no event is made
--   ROWS      task id -> row (its fields, then its body) RESULTS   task id -> result
--   LASTERR   task id -> last error                     LIMITS    task id -> the retry limit its latest
--                                                                  failed execution ran with (only a task
--                                                                  with failures, row field ne = "1")
--   TRACEBACKS task id -> the traceback of its latest failed execution (only a task with failures whose
--             latest failed execution had one)
-- ARGV head (the same for every operation):
--   ARGV[1] now (epoch seconds, from the caller's clock; "" = the server's TIME, for calls queued
--           behind a blocking pop, which run later than they were sent)
--   ARGV[2] origin: id of the calling broker object (tags published events)
--   ARGV[3] "1": also return the events to the caller (it has local subscribers); "0"/"1" may be
--           followed by " <queue> <count>" pairs: an enqueue's registrations (enqueue.lua: register)
--   ARGV[4] the policy, "<MAX_ERRORS_KEPT> <archive_retention> <max_stalls> <resend window, ms>" (one
--           argument; read as numbers only by the operations that use them: max_errors() and so on)
--   ARGV[5] only in the calls of scripts.TOKENED (enqueue, take, settle, withdraw, the operator's
--           actions): the call's token (see repeated())
-- Operation arguments follow: A(1) is ARGV[5] (ARGV[6] after a token). Optional strings travel as ""
-- (None) or "=" .. value.
-- Every operation returns {result, now} or, with events wanted and some made, {result, now, events},
-- and, when it deleted tasks whose entries the namespace slot's indexes hold, {result, now, events or
-- "", freed} (freed: lines "u <unique key> <id>" and, in a labelled slot, "i <custom id> <label>", for
-- release.lua: see remove_task());
-- a string result with nothing else to return comes as one string, now .. "\n" .. result (a table
-- reply costs the server a conversion, a string nothing). Events are also SPUBLISHed as
-- "origin\nnow\n" .. lines "id\told\tnew\tqueue", one message per call.
-- Events are made only when someone wants them (EMIT: the caller has local subscribers, or LISTENING
-- exists; a call reads LISTENING when it begins, a slot it switches to at its first event, if any:
-- the idle partitions a claim passes never read it). Operations check everything before their first
-- write, and a function that may write is refused as a whole by a server out of memory, so an error
-- leaves nothing half-written.
--
-- Per-call state lives in the locals below, set by begin() at the start of every call (a library's
-- locals outlive a call; nothing may carry over from one call to the next).

local KEYS, ARGV
local P, NOW, ORIGIN, WANT, NOWS, POLICY
local BASE, TOKEN, SENTP -- A(i) is ARGV[BASE + i]; the call's token; where answers are kept (repeated())
local DUE, LEASES, EXPIRING, SEQ, QUEUES, UNIQ, IDS, CHANNEL, WAKE, LISTENING, ROWS, RESULTS, LASTERR, LIMITS, TRACEBACKS
local LABEL -- the label of a queue slot "{ns|label}:..." (nil in layout 4's one slot, "{ns}:...")
local EMIT, EVENTS, WOKEN, DEFER, ZOPS, ZORDER, SETTINGS, FREED
local UNSURE = {} -- EMIT in a slot switched to, until LISTENING is read: truthy, event() decides
local DUE_SOON = 60 -- seconds: a task scheduled or retried to fall due sooner pushes WAKE (index())
local SENT -- events of the slots a call over several left already (switch()), nil in a call of one slot
-- the SETTINGS of each slot a call over several visited (switch()), by prefix: a queue's settings are
-- its slot's (a retired partition keeps the share it had), nil in a call of one slot
local SLOT_SETTINGS
local CHECKED -- whether the call has asked repeated() already (a joined call's parts ask once)

-- the key names of a queue slot, by its `seq` key, and of a namespace slot, by its `queues` key: built
-- once per slot, not per call (a pure function of the name, so nothing of a call's state carries over)
local NAMES, NSNAMES = {}, {}
local function names(seq)
  local n = NAMES[seq]
  if not n then
    local p = string.sub(seq, 1, -4) -- "{ns}:v4:seq" -> "{ns}:v4:"
    n = {p, p .. 'due', p .. 'leases', p .. 'expiring', seq, p .. 'events', p .. 'wake', p .. 'listening',
      p .. 'rows', p .. 'results', p .. 'lasterr', p .. 'limits', p .. 'tracebacks',
      string.match(p, '^{[^|}]*|([^}]*)}') or false, p .. 'sent:'}
    NAMES[seq] = n
  end
  return n
end
local function namespace_names(registry)
  local n = NSNAMES[registry]
  if not n then
    local p = string.sub(registry, 1, -7) -- "{ns}:v4:queues" -> "{ns}:v4:"
    n = {registry, p .. 'uniq', p .. 'ids', p .. 'sent:'}
    NSNAMES[registry] = n
  end
  return n
end

-- quiet: an operation of scripts.READ_ONLY, which makes no events: LISTENING is not read
local function begin(keys, argv, tokened, quiet)
  KEYS, ARGV = keys, argv
  if tokened then BASE, TOKEN = 5, ARGV[5] else BASE, TOKEN = 4, nil end
  ORIGIN, WANT, POLICY = ARGV[2], ARGV[3] == '1' or string.byte(ARGV[3]) == 49, nil
  if ARGV[1] == '' then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) + tonumber(t[2]) / 1000000
    NOWS = string.format('%.17g', NOW)
  else -- the caller's repr(): the shortest text that reads back as the same double
    NOWS = ARGV[1]
    NOW = tonumber(NOWS)
  end
  P, DUE, LEASES, EXPIRING, SEQ, CHANNEL, WAKE, LISTENING, ROWS, RESULTS, LASTERR, LIMITS, TRACEBACKS, LABEL, SENTP =
    unpack(names(KEYS[1]))
  if KEYS[2] then QUEUES, UNIQ = unpack(namespace_names(KEYS[2])) else QUEUES, UNIQ = nil, nil end
  EMIT = not quiet and (WANT or redis.call('EXISTS', LISTENING) == 1)
  -- the tables below only when a call uses them (a one-task enqueue needs few of them)
  EVENTS, WOKEN, DEFER, ZOPS, ZORDER, SETTINGS, FREED = EMIT and {} or nil, false, false, nil, nil, {}, nil
  SENT, SLOT_SETTINGS, CHECKED = nil, nil, false
end

-- begin() of the operations of the namespace slot alone (scripts.NAMESPACE_ONLY): KEYS[1] is its
-- `queues` registry; they touch no queue slot's key and make no events
local function begin_namespace(keys, argv, tokened)
  KEYS, ARGV = keys, argv
  if tokened then BASE, TOKEN = 5, ARGV[5] else BASE, TOKEN = 4, nil end
  ORIGIN, WANT, POLICY, NOWS, NOW = ARGV[2], false, nil, ARGV[1], tonumber(ARGV[1])
  P, DUE, LEASES, EXPIRING, SEQ, CHANNEL, WAKE, LISTENING, ROWS, RESULTS, LASTERR, LIMITS, TRACEBACKS, LABEL = nil
  QUEUES, UNIQ, IDS, SENTP = unpack(namespace_names(KEYS[1]))
  EMIT, EVENTS, WOKEN, DEFER, ZOPS, ZORDER, SETTINGS, FREED = false, nil, false, false, nil, nil, {}, nil
  CHECKED = false
end

-- Sorted-set writes while DEFER is on are buffered per key (order kept per key) and sent as one
-- ZADD/ZREM per key and run by flush_z(); a script turns DEFER on only where it no longer reads the
-- sorted sets it writes. Hash writes are never deferred.
local function zop(cmd, key, a, b)
  if not DEFER then
    if b then return redis.call(cmd, key, a, b) end
    return redis.call(cmd, key, a)
  end
  if not ZOPS then ZOPS, ZORDER = {}, {} end
  local ops = ZOPS[key]
  if not ops then
    ops = {}
    ZOPS[key] = ops
    ZORDER[#ZORDER + 1] = key
  end
  local last = ops[#ops]
  if not last or last[1] ~= cmd then
    last = {cmd, key}
    ops[#ops + 1] = last
  end
  last[#last + 1] = a
  if b then last[#last + 1] = b end
end
local function flush_z()
  if not ZORDER then return end
  for _, key in ipairs(ZORDER) do
    for _, op in ipairs(ZOPS[key]) do
      local step = op[1] == 'ZADD' and 4000 or 2000
      for i = 3, #op, step do
        redis.call(op[1], key, unpack(op, i, math.min(#op, i + step - 1)))
      end
    end
  end
  ZOPS, ZORDER = nil, nil
end

-- `cmd key list[1..n]` in commands of at most 4000 arguments (unpack() stops at 8000); for the hot
-- paths' batches, which build their own lists: zop() is too dear per call for them
local function call_all(cmd, key, list, n)
  for i = 1, n, 4000 do redis.call(cmd, key, unpack(list, i, math.min(n, i + 3999))) end
end

local function A(i) return ARGV[BASE + i] end
-- the policy's numbers by its text: a broker sends the same text in every call (a pure function of
-- the text, so nothing of a call carries over; at most 64 texts kept)
local POLICIES, POLICY_TEXTS = {}, 0
local function policy(i)
  if not POLICY then
    POLICY = POLICIES[ARGV[4]]
    if not POLICY then
      POLICY = {}
      for v in string.gmatch(ARGV[4], '%S+') do POLICY[#POLICY + 1] = tonumber(v) end
      if POLICY_TEXTS >= 64 then POLICIES, POLICY_TEXTS = {}, 0 end
      POLICIES[ARGV[4]], POLICY_TEXTS = POLICY, POLICY_TEXTS + 1
    end
  end
  return POLICY[i]
end
local function max_errors() return policy(1) end
local function retention() return policy(2) end
local function max_stalls() return policy(3) end
local function num(s) if s == nil or s == false or s == '' then return nil end return tonumber(s) end
local function opt(s) if s == nil or s == '' then return nil end return string.sub(s, 2) end
-- The values of a batch call (enqueue, settle) travel as one JSON array in A(2); long ones (a body, a
-- result, an error) instead as arguments of their own: A(3) lists their places in the array
-- (space-separated), A(4) onwards are the values, in that order, and the array holds "" there.
-- cjson reads a value byte by byte; an argument is copied whatever its length
-- (docs/performance-notes.md). The array with every value in place.
local function batch_values()
  local V = cjson.decode(A(2))
  if A(3) then
    local k = 4
    for place in string.gmatch(A(3), '%d+') do
      V[tonumber(place)] = A(k)
      k = k + 1
    end
  end
  return V
end
-- numbers reach Redis as strings; Lua's own tostring keeps 14 digits only, times need 17
local function f(x) return string.format('%.17g', x) end
local function ekey(id) return P .. 'e:' .. id end
local function qkey(q, part) return P .. 'q:' .. q .. ':' .. part end
local function skey(q) return P .. 'qs:' .. q end
local function idof(m) return string.sub(m, 17) end
local function unfinished(s) return s == 'pending' or s == 'scheduled' or s == 'retry' or s == 'active' end

local function event(id, old, new, q)
  if not EMIT then return end
  if EMIT == UNSURE then
    EMIT = redis.call('EXISTS', LISTENING) == 1
    if not EMIT then return end
    EVENTS = {}
  end
  EVENTS[#EVENTS + 1] = id .. '\t' .. (old or '') .. '\t' .. new .. '\t' .. q
end

-- the slot's buffered writes, wake-up token and events sent: at the end of a call, or of one slot's
-- part of a call over several (switch())
local function leave_slot()
  flush_z()
  if WOKEN and redis.call('LLEN', WAKE) == 0 then -- at most one token; usually one is there already
    redis.call('LPUSH', WAKE, '1')
  end
  if EVENTS and #EVENTS > 0 then
    local blob = table.concat(EVENTS, '\n')
    redis.call('SPUBLISH', CHANNEL, ORIGIN .. '\n' .. NOWS .. '\n' .. blob)
    return blob
  end
end

-- Go on in the queue slot whose `seq` is given, after sending what the call did in the one before: a
-- call over queues of several slots, which only one server takes (it checks no slots; a cluster gets
-- one call per slot, docs/architecture.md, "Redis Cluster: keys per queue").
local function switch(seq)
  local blob = leave_slot()
  if blob then SENT = SENT and (SENT .. '\n' .. blob) or blob end
  SLOT_SETTINGS = SLOT_SETTINGS or {}
  SLOT_SETTINGS[P] = SETTINGS
  P, DUE, LEASES, EXPIRING, SEQ, CHANNEL, WAKE, LISTENING, ROWS, RESULTS, LASTERR, LIMITS, TRACEBACKS, LABEL, SENTP =
    unpack(names(seq))
  EMIT = WANT or UNSURE
  EVENTS, WOKEN = WANT and {} or nil, false
  SETTINGS = SLOT_SETTINGS[P] or {}
end

-- a call's reply (see the header); `keep`: a call of scripts.TOKENED keeps its answer for a repeat
local function finish(result, keep)
  local blob = leave_slot()
  local freed = FREED and table.concat(FREED, '\n') -- see remove_task()
  if SENT then blob = blob and (SENT .. '\n' .. blob) or SENT end
  if keep and (result ~= '' or (blob and WANT)) then -- else the "\0" repeated() wrote says it
    redis.call('SET', SENTP .. TOKEN, result .. '\0' .. (WANT and blob or ''), 'PX', policy(4))
  end
  if blob and WANT then return {result, NOWS, blob, freed} end
  if freed then return {result, NOWS, '', freed} end
  if type(result) == 'string' then return NOWS .. '\n' .. result end
  return {result, NOWS}
end
