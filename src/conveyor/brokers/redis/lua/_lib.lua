-- _lib.lua: the helpers every operation shares (code only, no values). scripts.py builds one Redis
-- Functions library from it and the operation files (each becomes a function `conveyor_<version>_<op>`),
-- loaded once per server: the helpers below are built at load time, not on every call.
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

-- Texts shared with the memory and SQLite brokers (conveyor/brokers/transitions.py; a test checks they
-- match): a task expired before it started, a retry whose outcome gave no error, an expired lease
-- ({stalls}: the task's stall count, this one included).
local EXPIRED_ERROR = 'Expired: not started before its deadline'
local RETRY_ERROR = 'Retry'
local LEASE_EXPIRED_ERROR = 'LeaseExpired: lease expired without an acknowledgement ({stalls} stall(s))'

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

local function begin(keys, argv, tokened)
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
  EMIT = WANT or redis.call('EXISTS', LISTENING) == 1
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

-- A call sent again. The broker sends a call once more when its connection broke before the reply
-- was read (redis-py's retry in connections.py; cluster.py), so its first send may have run: it would
-- meet its own tasks as duplicates, or store again a task that ran and was deleted meanwhile. A call
-- of scripts.TOKENED carries a random token, the same in every send of it. An enqueue, a take, a
-- withdraw or an operator's action starts with repeated(): one SET NX of SENTP .. token, kept for
-- the resend window (policy(4), ms), which tells a first send (the key was absent) from a repeat (it
-- was there). A first send's answer is kept in that key: "\0" (the SET's own value) stands for ""
-- without events, the usual answer, so only another answer costs a second write (finish()); a
-- refusal (an error reply, nothing written) deletes the key, so a repeat decides afresh
-- (forget_sent()). A repeat writes nothing and answers as the first send did, its events included.
-- A settle tells a repeat by the rows its first send wrote (settle.lua), and keeps its answer only
-- where they may not show it: it reads the key (sent_answer()) only when an outcome finds no sign of
-- it. A claim's token is its lease token base, and it keeps its own kind of answer (claim.lua).
-- A refusal that wrote something (take_enqueue.lua's) is kept too, "\1" and its text, and a repeat
-- refuses with it again (refuse_kept()). A call joining two operations asks once, for both: the
-- second repeated() of a call answers nil.
local function answer_again(result, blob)
  if blob ~= '' and WANT then return {result, NOWS, blob} end
  return NOWS .. '\n' .. result
end
local function kept_answer(kept)
  local cut = string.find(kept, '\0', 1, true)
  return answer_again(string.sub(kept, 1, cut - 1), string.sub(kept, cut + 1))
end
local function repeated()
  if CHECKED then return nil end
  CHECKED = true
  local kept = redis.call('SET', SENTP .. TOKEN, '\0', 'PX', policy(4), 'NX', 'GET')
  if not kept then return nil end
  if string.byte(kept) == 1 then return redis.error_reply(string.sub(kept, 2)) end
  return kept_answer(kept)
end
local function refuse_kept(refusal)
  redis.call('SET', SENTP .. TOKEN, '\1' .. refusal, 'PX', policy(4))
  return redis.error_reply(refusal)
end
local function sent_answer()
  local kept = redis.call('GET', SENTP .. TOKEN)
  if not kept then return nil end
  return kept_answer(kept)
end
local function forget_sent(refusal)
  redis.call('DEL', SENTP .. TOKEN)
  return refusal
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

-- A task is one row in ROWS: fixed fields, space-separated ("-" = absent; see codec.py), then its body
-- (name, options and payload, made by the client and never parsed here), with its result in RESULTS,
-- its last error in LASTERR (row field l = "1" while there is one) and its failures in the list
-- e:<id> (row field ne = "1" once it exists). One row per task, in one hash, lets a claim or a settle
-- read and write a whole batch of tasks with one command each: a command costs a script a fixed
-- amount plus a little per argument, whatever the key. The body in the row, not in a hash of its own,
-- saves one command per one-task enqueue and per claim, though every rewrite of a row copies it
-- (figures for both: docs/performance-notes.md).
-- A pending task waits in its queue's `waiting` zset (by ready_at: the oldest pending task) under its
-- member, or, stored by a call that enqueued several plain tasks, under its call's group: one member
-- "g" .. ready_at for all of them (their ready_at is the call's now), with their count in the
-- queue's `groups` hash; row field fa holds that member while the task is pending (fa means
-- something else only once finished; parse() sets t.g). A group leaves `waiting` when its count
-- reaches 0 (ungroup()); a grouped task leaving `pending` any way leaves its group for good
-- (unindex(): t.g = nil, so its row is saved without it: a claim leaves it in the active row, where
-- nothing reads it), and waits under its own member if it comes back. One
-- entry per call instead of one per task (docs/performance-notes.md).
-- Field order, hottest first: FIELDS below (codec.ROW_NAMES; a test checks they match), where uk is
-- "=" .. the unique key as the client escaped it (no whitespace), then the body: the rest of the row
-- (it may hold anything). ROW matches a whole row; claim.lua and settle.lua match only the head of
-- a row, each with a pattern of its own (CLAIM_HEAD, SETTLE_HEAD) that captures just the fields it
-- reads and ends with the position where the rest begins: a capture of the rest would read every byte
-- of the body. All three are built here, once, from FIELDS, and so are a new task's row (new_row) and
-- FRESH, its head as claim.lua compares it.
local ROW, CLAIM_HEAD, SETTLE_HEAD, NEW_RUNS, FRESH
do
  local FIELDS = {'s', 'm', 'q', 'x', 'a', 'c', 'l', 'ne', 'tk', 'lx', 'sa', 'fa', 'ku', 'r', 'st', 'pr', 'ea', 'fd',
    'ra', 'nr', 'ar', 'uu', 'uk'}
  -- fields a pattern passes over without capturing them
  local function skip(...) return {skip = true, ...} end
  -- the pattern of a row's head as `spec` lists it from the first field on, in FIELDS's order: a name
  -- is one field captured, a list several fields captured as one text (spaces included), skip(...)
  -- fields not captured; then `rest`. A name out of that order stops FUNCTION LOAD (by indexing nil:
  -- error(), like the string library, is not reachable while the library loads).
  local function head(spec, rest)
    local pattern, k = '^', 0
    for i = 1, #spec do
      local e = spec[i]
      if e == FIELDS[k + 1] then
        pattern, k = pattern .. '(%S+) ', k + 1
      else
        local text = ''
        for j = 1, #e do
          k = k + 1
          if e[j] ~= FIELDS[k] then return FIELDS.head_out_of_row_order.stop end
          text = text .. (j > 1 and ' %S+' or '%S+')
        end
        pattern = pattern .. (e.skip and text or '(' .. text .. ')') .. ' '
      end
    end
    return pattern .. rest
  end
  ROW = head(FIELDS, '(.*)$')
  -- claim.lua: s m q x a (c) l ne (tk lx sa), then where fa begins
  CLAIM_HEAD = head({'s', 'm', 'q', 'x', 'a', skip('c'), 'l', 'ne', skip('tk', 'lx', 'sa')}, '()')
  -- settle.lua: s m q (x a c as one) l ne tk (lx sa as one) (fa ku), then where r begins
  SETTLE_HEAD = head({'s', 'm', 'q', {'x', 'a', 'c'}, 'l', 'ne', 'tk', {'lx', 'sa'}, skip('fa', 'ku')}, '()')
  -- A new task's row: s m q x given per task (new_row), then the fields after x up to uk, each either
  -- NEW's (counters and flags 0, no lease, no result) or, in FIELDS's order, one the task sets (NEW_SETS:
  -- new_tail's parameters), which new_tail() puts between the runs of NEW's values (NEW_RUNS). FIELDS
  -- not starting with s m q x, or NEW_SETS out of its order, stops FUNCTION LOAD, as above.
  local NEW = {a = '0', c = '0', l = '0', ne = '0', tk = '-', lx = '-', sa = '-', ku = '-', r = '0', st = '0',
    ar = '-'}
  local NEW_SETS = {'fa', 'pr', 'ea', 'fd', 'ra', 'nr', 'uu', 'uk'}
  local _ = FIELDS[1] .. FIELDS[2] .. FIELDS[3] .. FIELDS[4] == 'smqx' or FIELDS.new_row_not_s_m_q_x.stop
  local run, k = ' ', 0
  NEW_RUNS = {}
  for i = 5, #FIELDS do
    local name = FIELDS[i]
    if NEW[name] then
      run = run .. NEW[name] .. ' '
    else
      k = k + 1
      _ = name == NEW_SETS[k] or FIELDS.new_sets_out_of_row_order.stop
      NEW_RUNS[k], run = run, ' '
    end
  end
  _ = k == #NEW_SETS or FIELDS.new_sets_out_of_row_order.stop
  NEW_RUNS[k + 1] = run
  -- what follows "pending <m> <q> " in the row of a task never claimed, without expires_at: x (none),
  -- then NEW's a .. sa (claim.lua compares it as one string: cheaper than matching CLAIM_HEAD field by
  -- field)
  FRESH = '- '
  for i = 5, #FIELDS do
    if FIELDS[i] == 'fa' then break end
    FRESH = FRESH .. (NEW[FIELDS[i]] or FIELDS.fresh_field_not_fixed.stop) .. ' '
  end
end

local function str(s) if s == '-' then return nil end return s end
-- string.byte('g'): a pending row whose fa starts with it waits in that group (see above)
local GROUPED = 103

-- a task from its row, or nil if the row is missing or unusable
local function parse(id, row)
  if not row then return nil end
  local s, m, q, x, a, c, l, ne, tk, lx, sa, fa, ku, r, st, pr, ea, fd, ra, nr, ar, uu, uk, b =
    string.match(row, ROW)
  if not s then return nil end
  return {id = id, s = s, m = m, q = q, x = num(x), a = num(a) or 0, c = c, l = l == '1', ne = ne == '1',
    g = s == 'pending' and string.byte(fa) == GROUPED and fa or nil, -- its group in `waiting`
    tk = str(tk), lx = num(lx), sa = num(sa), fa = num(fa), ku = num(ku), r = num(r) or 0, st = num(st) or 0,
    pr = num(pr) or 0, ea = num(ea) or NOW, fd = num(fd) or NOW, ra = num(ra) or NOW, nr = num(nr), ar = str(ar),
    uu = num(uu), uk = opt(str(uk)), b = b}
end

-- a number as a row keeps it (the caller's text for now: no formatting)
local function rn(x)
  if x == nil then return '-' end
  if x == NOW then return NOWS end
  return f(x)
end

local function pack(t)
  return table.concat({t.s, t.m, t.q, rn(t.x), f(t.a), t.c == '1' and '1' or '0', t.l and '1' or '0',
    t.ne and '1' or '0', t.tk or '-', rn(t.lx), rn(t.sa), t.g or rn(t.fa), rn(t.ku), f(t.r), f(t.st), f(t.pr),
    rn(t.ea), rn(t.fd), rn(t.ra), rn(t.nr), t.ar or '-', rn(t.uu), t.uk and '=' .. t.uk or '-', t.b}, ' ')
end

-- the fields after x of a new task's row (see NEW above): NEW_SETS's, as a row holds them ("-":
-- absent), between NEW's; one tail serves every task of a call that sets the same values (enqueue.lua:
-- its plain tasks of a priority). Its parameters are NEW_SETS (a test checks it).
local function new_tail(fa, pr, ea, fd, ra, nr, uu, uk)
  local r = NEW_RUNS
  return r[1] .. fa .. r[2] .. pr .. r[3] .. ea .. r[4] .. fd .. r[5] .. ra .. r[6] .. nr .. r[7] .. uu .. r[8]
    .. uk .. r[9]
end
-- a new task's row, as pack() would make it (x: expires_at, nil for none; tail: new_tail()'s)
local function new_row(s, m, q, x, tail, body)
  return s .. ' ' .. m .. ' ' .. q .. ' ' .. (x and f(x) or '-') .. tail .. body
end

local function load(id) return parse(id, redis.call('HGET', ROWS, id)) end
local function save(t) redis.call('HSET', ROWS, t.id, pack(t)) end

local function visible(t) return t ~= nil and (t.ku == nil or NOW < t.ku) end

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

-- whether an entry of UNIQ names task `id`: "<id>" (written by enqueue.lua) or "<id> <since>" (take.lua)
local function entry_names(entry, id)
  return entry == id or (entry and string.sub(entry, 1, #id + 1) == id .. ' ')
end

-- The server's TIME as text, "<seconds>.<6 digits>": an entry's `since` (below), so its age does not
-- depend on the callers' clocks (made without tonumber() and string.format(), dear in a hot call).
local function server_time()
  local t = redis.call('TIME')
  local us = t[2]
  if #us < 6 then us = string.sub('00000' .. us, -6) end
  return t[1] .. '.' .. us
end

-- The rule of the namespace slot's entries (take.lua, take_enqueue.lua; the broker: claims.py), for
-- the entry `field` of `index` (kind "u": `uniq`, unique key -> "<id> <since>"; "i": `ids`, custom id
-- -> "<label> <since>"), read as `entry` (false: absent), that a task claims to name `value`, taking
-- it over from `expected` ("" none): its answer, "" (free, or naming `expected`), "=" (naming `value`
-- already) or "<what it names> <1 if older than `bound` seconds at `now`, else 0>", and whether the
-- entry is to be written (value .. " " .. now), which the caller does. `v4`: layout 4's prefix while it
-- holds data (upgrade.py), else "": a free entry that layout 4 still holds, for a task it has, is
-- answered as held, and young, by its holder (a custom id: by ":v4", a label no queue has), unless
-- that is `expected`. `bound` and `now` are text, read only for an entry held by another.
local function entry_answer(kind, entry, field, value, expected, v4, bound, now)
  local holder, at = nil, nil
  if entry then holder, at = string.match(entry, '^(%S+) ?(%S*)$') end
  if not entry and v4 ~= '' then -- layout 4's own entry, for a task it still has
    local held = kind == 'i' and field or redis.call('HGET', v4 .. 'uniq', field)
    if held and redis.call('HEXISTS', v4 .. 'rows', held) == 1 then
      holder = kind == 'i' and ':v4' or held
      if holder ~= expected then entry, at = true, nil end -- held since now: young
    end
  end
  if not entry or holder == expected or holder == value then
    return (holder == value and holder ~= expected) and '=' or '', true
  end
  local old = at == '' or (at ~= nil and tonumber(at) + tonumber(bound) < tonumber(now))
  return holder .. (old and ' 1' or ' 0'), false
end

-- take.lua's step over the quadruples (kind, field, value, expected) q[from] .. q[last] (q: ARGV, or
-- a list take_enqueue.lua built), `bound` and `v4` as entry_answer() takes them, each entry judged
-- and written in turn; its answers joined by newlines
local function take_entries(q, from, last, bound, v4)
  local now = server_time()
  local since, out = ' ' .. now, {}
  for i = from, last, 4 do
    local kind, field, value = q[i], q[i + 1], q[i + 2]
    local index = kind == 'i' and IDS or UNIQ
    local answer, free = entry_answer(kind, redis.call('HGET', index, field), field, value, q[i + 3], v4, bound, now)
    if free then redis.call('HSET', index, field, value .. since) end
    out[#out + 1] = answer
  end
  return table.concat(out, '\n')
end

-- a task's row, side hashes and failures deleted (the move from layout 4: upgrade*.lua)
local function drop_data(id)
  redis.call('HDEL', ROWS, id)
  redis.call('HDEL', RESULTS, id)
  redis.call('HDEL', LASTERR, id)
  redis.call('HDEL', LIMITS, id)
  redis.call('HDEL', TRACEBACKS, id)
  redis.call('DEL', ekey(id))
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

-- The upkeep of one entry of the current slot's DUE, LEASES or EXPIRING (member m, due by NOW): 1 if
-- it moved its task, else 0 (an entry whose task is no longer there, in that state, is dropped).
-- due scheduled/retry -> pending (ready_at = next_run_at)
local function promote_one(m)
  local t = load(idof(m))
  if t and (t.s == 'scheduled' or t.s == 'retry') and t.m == m and t.nr and t.nr <= NOW then
    make_pending(t, t.nr)
    return 1
  end
  if not (t and t.m == m and (t.s == 'scheduled' or t.s == 'retry')) then redis.call('ZREM', DUE, m) end
  return 0
end
-- an expired lease: pending again (stalls + 1), or archived poison at max_stalls
local function reap_one(m)
  local t = load(idof(m))
  if t and t.s == 'active' and t.m == m and t.lx and t.lx <= NOW then
    local lx = t.lx
    t.st = t.st + 1
    local err = (string.gsub(LEASE_EXPIRED_ERROR, '{stalls}', t.st))
    if t.st >= max_stalls() then
      archive_task(t, 'poison', err)
    else
      add_error(t, err)
      make_pending(t, lx, err)
    end
    return 1
  end
  if not (t and t.m == m and t.s == 'active') then redis.call('ZREM', LEASES, m) end
  return 0
end
-- a waiting task past its expires_at: archived expired
local function expire_one(m)
  local t = load(idof(m))
  if t and (t.s == 'pending' or t.s == 'scheduled' or t.s == 'retry') and t.m == m and t.x and t.x <= NOW then
    archive_task(t, 'expired', EXPIRED_ERROR)
    return 1
  end
  if not (t and t.m == m and (t.s == 'pending' or t.s == 'scheduled' or t.s == 'retry')) then
    redis.call('ZREM', EXPIRING, m)
  end
  return 0
end

-- up to n entries of the current slot's sorted set `key` due by NOW, earliest first, each by `one`
local function upkeep(key, n, one)
  local done = 0
  if n <= 0 then return 0 end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', NOWS, 'LIMIT', 0, n)) do done = done + one(m) end
  return done
end

-- promote up to n due scheduled/retry tasks (ready_at = next_run_at)
local function promote(n)
  return upkeep(DUE, n, promote_one)
end

-- reclaim up to n expired leases, then archive expired waiting tasks (within the same budget)
local function reap(n)
  local done = upkeep(LEASES, n, reap_one)
  return done + upkeep(EXPIRING, n - done, expire_one)
end

-- Upkeep over the queue slots of one call (promote.lua, reap.lua): `slots`, their `seq` keys, the
-- first the call's own. A budget too small for every due entry goes to the earliest first over all
-- of them, ties by member (the sequence number, then the id), as memory:// spends it over every queue;
-- each slot's entries are handled in its turn, in that order. `field`: DUE (2), LEASES (3) or
-- EXPIRING (4), a place in names(); `one`: promote_one, reap_one or expire_one. How many it moved.
local FIELD_DUE, FIELD_LEASES, FIELD_EXPIRING = 2, 3, 4
local function earlier(x, y)
  if x[1] ~= y[1] then return x[1] < y[1] end
  return x[2] < y[2]
end
local function spend(slots, field, n, one)
  if n <= 0 then return 0 end
  local here = SEQ
  local function go(seq)
    if seq ~= here then
      switch(seq)
      here = seq
    end
  end
  local total = 0
  if #slots > 1 then
    for _, seq in ipairs(slots) do
      total = total + redis.call('ZCOUNT', names(seq)[field], '-inf', NOWS)
      if total > n then break end
    end
  end
  local done = 0
  if total <= n then -- room for every due entry: slot by slot
    for _, seq in ipairs(slots) do
      go(seq)
      done = done + upkeep(names(seq)[field], n - done, one)
    end
    return done
  end
  for _ = 1, 4 do -- a round more only after dropped entries (a task gone): they are rare
    local all = {}
    for _, seq in ipairs(slots) do
      local got = redis.call('ZRANGEBYSCORE', names(seq)[field], '-inf', NOWS, 'WITHSCORES', 'LIMIT', 0, n - done)
      for j = 1, #got, 2 do all[#all + 1] = {tonumber(got[j + 1]), got[j], seq} end
    end
    if #all == 0 then break end
    table.sort(all, earlier)
    local picked, moved = math.min(#all, n - done), 0
    for _, seq in ipairs(slots) do
      for j = 1, picked do
        if all[j][3] == seq then
          go(seq)
          moved = moved + one(all[j][2])
        end
      end
    end
    done = done + moved
    if moved == picked or done >= n then break end -- else dropped entries leave room for the next
  end
  return done
end

-- the `seq` keys of the slots of a call over several: KEYS[1]'s, then A(from..)'s
local function call_slots(from)
  local slots, i = {KEYS[1]}, from
  while A(i) do
    slots[#slots + 1] = A(i)
    i = i + 1
  end
  return slots
end

-- the entries A(from..) (members of this slot's), each by `one`: the upkeep a broker on a cluster
-- chose over every slot (broker.py); how many moved
local function each_member(from, one)
  local done, i = 0, from
  while A(i) do
    done = done + one(A(i))
    i = i + 1
  end
  return done
end

-- a task as stored, {row, result, last error, failures, retry limit, traceback} (false: absent), or nil without a row
local function dump(id)
  local row = redis.call('HGET', ROWS, id)
  if not row then return nil end
  return {row, redis.call('HGET', RESULTS, id), redis.call('HGET', LASTERR, id), redis.call('LRANGE', ekey(id), 0, -1),
    redis.call('HGET', LIMITS, id), redis.call('HGET', TRACEBACKS, id)}
end

-- admin calls: the visible task, or an error reply the caller maps to TaskNotFound
local function existing(id)
  local t = load(id)
  if not visible(t) then return nil end
  return t
end
