-- claim.lua: lease up to `limit` ready tasks from the queues in the order given.
-- KEYS: the queue slot's (_call.lua), which holds the queues of A(5..) up to the first slot's key.
-- ARGV: head (_call.lua), then A(1) lease_for, A(2) limit, A(3) token base (random, from the caller),
--       A(4) maintenance budget (due tasks promoted and leases reaped in each slot, each at most this
--       many), A(5..) queue names; on one server (which checks no slots) the `seq` key of another
--       queue slot may come between them: the queues after it are that slot's (switch()). Such a call
--       gets A(4) as "<budget> <j> <j>...": the places j of the `seq` keys of the slots whose upkeep
--       comes before any claim, as the first slot's does (the caller's choice, spread.py), where it
--       has any to do (one naming a single queue is probed first); every other slot is a later
--       partition of a queue, naming that one queue, whose upkeep comes in its turn.
-- Returns: a flat array: the row (body included) of each claimed task, in claim order, as it was
--          before this claim, then one string: "" or, when a claimed task has a last error or
--          failures, a JSON array of 3 values per such task: its position in the claim (1-based), its
--          last error, its failures (an array of "attempt\tat\terror"); false stands for an absent
--          value. Rows go as elements of the array, not as JSON: the server copies an element as it
--          is, while cjson.encode reads every byte to escape it (docs/performance-notes.md).
--          Nothing claimed: "". One task with neither: its row alone (a string reply costs less).
--          A claim that took fewer than `limit` tasks, while its slots hold scheduled or retry tasks,
--          also says when the first of them falls due: its last string is then "@<due>", followed by
--          "\n" and the JSON array if there is one (a reply that would be "" or a row alone is a table
--          {row, "@<due>"} or the string "@<due>"). Its idle waiter sleeps until then at most
--          (broker.py: claim_after_wait); a claim that fills `limit` reads nothing more.
--          The caller knows the claim's own writes (s = active, a + 1, sa = now, lx = now + lease_for,
--          tk = "<base>-<position>", c = 0), which keeps the reply short.
--          A call sent again (its connection lost before the reply was read) answers the tasks its
--          first send leased, as that send answered, and claims nothing: a send that leased tasks
--          keeps "<now> <due or ->" under `sent:<token base>` in the first slot for the resend
--          window (policy(4)), which every call reads first (claimed_again()); a repeat finds its
--          tasks by their lease deadline (now + lease_for, in LEASES of each slot it names) and
--          their token ("<base>-<place>"). A task of it no longer leased to it (cancelled, its lease
--          reaped) is left out and the tokens of those after it renumbered.
-- Costs: per batch popped, one HMGET of the rows and one HSET of the new rows (plus
--   the sorted-set writes, one command per key): a claimed task costs a few arguments, not commands.
-- Transition: due scheduled/retry -> pending; expired leases -> pending or archived(poison);
--             pending past expires_at -> archived(expired); pending -> active (attempts + 1,
--             lease token "<base>-<i>", lease_expires_at = now + lease_for, started_at = now).

-- a row's head: CLAIM_HEAD, or FRESH for a task never claimed (_rows.lua, next to ROW)
local POP = 1000
local BRACE = 123 -- "{": starts a slot's key, never a queue name

-- per slot (its `seq`): the first due time its upkeep read and that nothing moved since (false: none)
local PEEKED = {}

-- the lowest score in sorted set `key` (nil: none)
local function earliest(key) return redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] end
-- the first due time of the current slot's `due` (nil: none)
local function peek_due() return earliest(DUE) end

-- the slot's upkeep: due tasks promoted, then expired leases and deadlines reaped, each at most `n`.
-- Its first read is the first due entry (`first`, if the caller read it: false for none), which also
-- answers first_due() when nothing was due and nothing was reaped (a reaped or expired task may leave
-- `due`; a claim never touches it). `quiet`: the caller read that no lease or deadline is past (no reap)
local function upkeep_here(n, first, quiet)
  if first == nil then first = peek_due() end
  local known = first or false
  if first and tonumber(first) <= NOW then
    promote(n)
    known = nil
  end
  if not quiet and reap(n) > 0 then known = nil end
  PEEKED[SEQ] = known
end

-- A later slot naming one queue (its `seq` key; `queue`, that queue) read without switching to it:
-- whether it has nothing to do (nothing pending, and no due time, lease or deadline past), its first
-- due time (false: none), and whether its leases and deadlines were read and none is past. Its
-- `due`, `leases` and `expiring` are sorted by those times, so the lowest score of each tells; EXISTS
-- counts them with `pending`, whose pop is left out where the others account for the count.
local function probe(seq, queue)
  local n = names(seq)
  local held = redis.call('EXISTS', n[2], n[3], n[4], n[1] .. 'q:' .. queue .. ':pending')
  if held == 0 then return true, false, false end
  local first = earliest(n[2]) or false
  if first and tonumber(first) <= NOW then return false, first, false end
  local found = first and 1 or 0
  for k = 3, 4 do
    if found == held then return true, first, false end
    local lowest = earliest(n[k])
    if lowest then
      if tonumber(lowest) <= NOW then return false, first, false end
      found = found + 1
    end
  end
  return found == held, first, true
end

-- the earlier of `due` (nil: none) and the first due time of the current slot's scheduled and retry
-- tasks, any queue's (one ZRANGE, unless its upkeep read it: the slot's `due` index knows no queue)
local function first_due(due)
  local d = PEEKED[SEQ]
  if d == nil then d = peek_due() end
  if d and (not due or tonumber(d) < tonumber(due)) then return d end
  return due
end

-- the reply of a call sent again whose first send leased tasks (see the header), or nil
local function claimed_again(sent, base, lease_for)
  local kept = redis.call('GET', sent)
  if not kept then return nil end
  local cut = string.find(kept, ' ', 1, true)
  local nows, due = string.sub(kept, 1, cut - 1), string.sub(kept, cut + 1)
  local lxs = f(tonumber(nows) + lease_for)
  -- by place in the first send's reply: the task, its row, and its slot's keys; the places found
  local found, places = {}, {}
  local j = 4
  repeat -- the leases it took in each slot it named: KEYS[1]'s, then each `seq` among the queues
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', LEASES, lxs, lxs)) do
      local id = idof(m)
      local row = redis.call('HGET', ROWS, id)
      local t = parse(id, row)
      local place = t and t.s == 'active' and t.tk and string.match(t.tk, '^' .. base .. '%-(%d+)$')
      if place then
        place = tonumber(place)
        found[place] = {t, row, LASTERR, LIMITS, P}
        places[#places + 1] = place
      end
    end
    repeat j = j + 1 until not A(j) or string.byte(A(j)) == BRACE
    if A(j) then switch(A(j)) end
  until not A(j)
  if #places == 0 then -- none still leased to it: claimed afresh, from the first slot
    if SEQ ~= KEYS[1] then switch(KEYS[1]) end
    return nil
  end
  table.sort(places)
  local out, extras, again = {}, {}, {}
  for k, place in ipairs(places) do
    local t, row, lasterr, limits, p = unpack(found[place])
    if k ~= place then -- a task before it is gone: the tokens stay numbered by place in the reply
      t.tk = base .. '-' .. k
      redis.call('HSET', p .. 'rows', t.id, pack(t))
    end
    -- the row as it was before the claim: attempts one fewer (the rest of the claim the caller knows)
    local _, m, q, x, a, l, ne, at = string.match(row, CLAIM_HEAD)
    out[k] = 'pending ' .. m .. ' ' .. q .. ' ' .. x .. ' ' .. f(tonumber(a) - 1) .. ' 0 ' .. l .. ' ' .. ne
      .. ' - - - ' .. string.sub(row, at)
    again[k] = t.id .. '\tpending\tactive\t' .. q
    if l == '1' or ne == '1' then
      local n = #extras
      extras[n + 1] = k
      extras[n + 2] = l == '1' and redis.call('HGET', lasterr, t.id) or false
      extras[n + 3] = ne == '1' and redis.call('LRANGE', p .. 'e:' .. t.id, 0, -1) or false
      extras[n + 4] = ne == '1' and redis.call('HGET', limits, t.id) or false
    end
  end
  local n = #places
  local tail = #extras > 0 and cjson.encode(extras) or ''
  if due ~= '-' then tail = '@' .. due .. (tail ~= '' and ('\n' .. tail) or '') end
  local result = out
  if n == 1 and tail == '' then result = out[1] else out[n + 1] = tail end
  if WANT then return {result, nows, table.concat(again, '\n')} end
  if type(result) == 'string' then return nows .. '\n' .. result end
  return {result, nows}
end

-- each call:
local sent = SENTP .. A(3)
local kept = claimed_again(sent, A(3), tonumber(A(1)))
if kept then return kept end
local lease_for, limit, base, budget = tonumber(A(1)), tonumber(A(2)), A(3), tonumber(A(4))
local places -- see below
if not budget then budget, places = string.match(A(4), '^(%d+) (.*)$') end
budget = tonumber(budget)
PEEKED = {}
upkeep_here(budget)
-- the upkeep of the slots the caller named in A(4) too, before any claim: a claim filled in an
-- earlier slot must not leave a later queue's due tasks unpromoted and expired leases unreaped (as one
-- slot's call would not). A later partition of a queue gets its upkeep when the claim reaches it, as
-- on a cluster (docs/architecture.md, "Redis Cluster: keys per queue"): claims start one partition
-- further each call, so each has it first in its turn, and the worker's promoter and reaper bound
-- the rest. The caller tells them apart: a scan of the arguments here cost more than the claim's
-- other Lua (docs/performance-notes.md).
-- A slot naming one queue (a plain queue's, in layout 5) is probed first (probe()): with nothing to
-- do it has no upkeep to give, and the claim passes it as a later partition's (`passing[j]`: its first
-- due time, false: none); nothing a claim does in another slot writes to its keys meanwhile.
local eager, passing = {}, nil
if places then
  local switched = false
  passing = {}
  for j in string.gmatch(places, '%d+') do
    j = tonumber(j)
    eager[j] = true
    local first, quiet
    if not A(j + 2) or string.byte(A(j + 2)) == BRACE then
      local nothing
      nothing, first, quiet = probe(A(j), A(j + 1))
      if nothing then passing[j] = first end
    end
    if passing[j] == nil then
      switch(A(j))
      switched = true
      upkeep_here(budget, first, quiet)
    end
  end
  if switched then switch(KEYS[1]) end
end
DEFER = true
local out, extras = {}, {}
local claimed = 0
local lxs = f(NOW + lease_for)
local i = 5
local due -- the first due time of the slots left behind with room to spare (see first_due)
local q = A(i)
while q and claimed < limit do
  if ZORDER then flush_z() end -- the ZCARD below must see this call's own claims
  local s = string.byte(q) ~= BRACE and settings(q)
  if not s then -- the next queues are another slot's
    -- (claimed < limit here: the loop ends once the claim is full)
    if eager[i] then
      local passed = passing[i]
      if passed ~= nil then -- nothing to do there (see above): left behind without a switch
        if passed and (not due or tonumber(passed) < tonumber(due)) then due = passed end
        i = i + 1
      else -- its upkeep done above
        due = first_due(due)
        switch(q)
      end
    else -- a later partition: passed where it has nothing to do (probe()), else its upkeep and turn
      local idle, first, quiet = probe(q, A(i + 1))
      if idle then -- left behind without a switch: its first due time noted here
        if first and (not due or tonumber(first) < tonumber(due)) then due = first end
        i = i + 1
      else
        due = first_due(due)
        switch(q)
        DEFER = false -- its upkeep's writes not deferred, as the first slot's are not
        upkeep_here(budget, first, quiet)
        DEFER = true
      end
    end
  elseif not s.pa then
    local room = limit - claimed
    if s.cc then room = math.min(room, s.cc - redis.call('ZCARD', qkey(q, 'active'))) end
    local kactive, kwaiting, fresh = qkey(q, 'active'), qkey(q, 'waiting'), ' ' .. q .. ' ' .. FRESH
    while room > 0 do
      -- at most POP at a time: the batch's ids go to HMGET through unpack(), which Lua caps at 8000
      local asked = math.min(room, POP)
      local popped = redis.call('ZPOPMIN', qkey(q, 'pending'), asked)
      if #popped == 0 then break end
      local ids = {}
      for j = 1, #popped / 2 do ids[j] = idof(popped[2 * j - 1]) end
      local rows = redis.call('HMGET', ROWS, unpack(ids))
      -- the batch's writes, sent after it as one command per key
      local writes, gone, started, leased, unexpiring, ungrouped = {}, {}, {}, {}, {}, {}
      local nw, ng, ns = 0, 0, 0
      for j, id in ipairs(ids) do
        local m, row = popped[2 * j - 1], rows[j]
        local s_, m_, q_, x, a, l, ne, rest
        if row then
          local head = 'pending ' .. m .. fresh
          if string.find(row, head, 1, true) == 1 then
            s_, m_, q_, x, a, l, ne, rest = 'pending', m, q, '-', '0', '0', '0', string.sub(row, #head + 1)
          else
            local at
            s_, m_, q_, x, a, l, ne, at = string.match(row, CLAIM_HEAD)
            if at then rest = string.sub(row, at) end
          end
        end
        local xn = num(x)
        if s_ ~= 'pending' or m_ ~= m then
          ng = ng + 1
          gone[ng] = m
        elseif xn and xn <= NOW then
          archive_task(parse(id, row), 'expired', EXPIRED_ERROR)
        else
          -- pending -> active: the row's head rewritten (s, a, c, tk, lx, sa), the rest kept as it was;
          -- the member left `pending` with the ZPOPMIN above
          claimed = claimed + 1
          local attempts = a == '0' and '1' or f((num(a) or 0) + 1)
          writes[nw + 1] = id
          writes[nw + 2] = 'active ' .. m .. ' ' .. q_ .. ' ' .. x .. ' ' .. attempts .. ' 0 ' .. l .. ' ' .. ne .. ' '
            .. base .. '-' .. claimed .. ' ' .. lxs .. ' ' .. NOWS .. ' ' .. rest
          nw = nw + 2
          if string.byte(rest) == GROUPED then -- fa holds its enqueue call's group: counted down below
            local g = string.sub(rest, 1, string.find(rest, ' ', 1, true) - 1)
            ungrouped[g] = (ungrouped[g] or 0) + 1
          else
            ng = ng + 1
            gone[ng] = m
          end
          if xn then unexpiring[#unexpiring + 1] = m end
          started[ns + 1], started[ns + 2] = NOWS, m
          leased[ns + 1], leased[ns + 2] = lxs, m
          ns = ns + 2
          if EMIT then event(id, 'pending', 'active', q_) end
          out[claimed] = row
          if l == '1' or ne == '1' then
            local n = #extras
            extras[n + 1] = claimed
            extras[n + 2] = l == '1' and redis.call('HGET', LASTERR, id) or false
            extras[n + 3] = ne == '1' and redis.call('LRANGE', ekey(id), 0, -1) or false
            extras[n + 4] = ne == '1' and redis.call('HGET', LIMITS, id) or false
          end
          room = room - 1
        end
      end
      if nw > 0 then redis.call('HSET', ROWS, unpack(writes)) end
      call_all('ZREM', kwaiting, gone, ng)
      for g, count in pairs(ungrouped) do ungroup(q, g, count) end
      call_all('ZADD', kactive, started, ns)
      call_all('ZADD', LEASES, leased, ns)
      call_all('ZREM', EXPIRING, unexpiring, #unexpiring)
      if #popped < 2 * asked then break end -- the queue ran out: no ZPOPMIN to find it empty
    end
  end
  i = i + 1
  q = A(i)
end
-- a string result goes back as one string, a table as a nested array (see finish())
if claimed < limit then due = first_due(due) end
if claimed > 0 then redis.call('SET', sent, NOWS .. ' ' .. (due or '-'), 'PX', policy(4)) end
local tail = #extras > 0 and cjson.encode(extras) or ''
if due then tail = '@' .. due .. (tail ~= '' and ('\n' .. tail) or '') end
if claimed == 0 then return finish(tail) end
if claimed == 1 and tail == '' then return finish(out[1]) end
out[claimed + 1] = tail
return finish(out)
