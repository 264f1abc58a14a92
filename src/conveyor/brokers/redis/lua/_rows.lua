-- _rows.lua: a task as stored: its row in ROWS (the field layout, the patterns that read it, a new
-- task's row), parse() and pack(), load() and save(), the reads of a whole task (dump(), existing())
-- and its data dropped whole (drop_data(), the move from layout 4).

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
local ROW, CLAIM_HEAD, SETTLE_HEAD, DUMP_HEAD, NEW_RUNS, FRESH
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
  -- dump(): s (m q x a c) l ne: its state, whether it has a last error and failures
  DUMP_HEAD = head({'s', skip('m', 'q', 'x', 'a', 'c'), 'l', 'ne'}, '')
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

-- a task's row, side hashes and failures deleted (the move from layout 4: upgrade*.lua)
local function drop_data(id)
  redis.call('HDEL', ROWS, id)
  redis.call('HDEL', RESULTS, id)
  redis.call('HDEL', LASTERR, id)
  redis.call('HDEL', LIMITS, id)
  redis.call('HDEL', TRACEBACKS, id)
  redis.call('DEL', ekey(id))
end

-- a task as stored, {row, result, last error, failures, retry limit, traceback} (false: absent), or nil
-- without a row; each side read only where the row says it may exist (a command from a script costs
-- the server as much whatever it finds: docs/performance-notes.md, "One call per get"): the
-- result of a completed task (only a settle's `complete` writes one, and a completed task leaves its
-- state only deleted), the last error where field l says there is one, the failures, retry limit
-- and traceback where ne does (as claim.lua does)
local function dump(id)
  local row = redis.call('HGET', ROWS, id)
  if not row then return nil end
  local s, l, ne = string.match(row, DUMP_HEAD)
  local failed = ne == '1'
  return {row, s == 'completed' and redis.call('HGET', RESULTS, id), l == '1' and redis.call('HGET', LASTERR, id),
    failed and redis.call('LRANGE', ekey(id), 0, -1) or {}, failed and redis.call('HGET', LIMITS, id),
    failed and redis.call('HGET', TRACEBACKS, id)}
end

-- admin calls: the visible task, or an error reply the caller maps to TaskNotFound
local function existing(id)
  local t = load(id)
  if not visible(t) then return nil end
  return t
end
