-- take_enqueue.lua: take.lua's step and enqueue.lua's in one call, on one server (which checks no
-- slots, as claims and upkeep over several slots are one call there: switch() in _call.lua): an
-- enqueue whose tasks hold unique keys or custom ids (claims.py) judges their entries in the namespace
-- slot by take's rule (entry_answer() in _entries.lua) and, when every one is free, stores the tasks by
-- enqueue's body in the queue slot and then writes the entries, as the two calls would have, without
-- the round trip between. Any other answer needs the broker to read the row of the task an entry
-- names: the call then runs take's step alone (take_entries(), as take.lua) and refuses with its
-- answers, and the broker goes on as after a take of its own. On a cluster the two steps are two
-- calls (claims.py).
-- KEYS: the queue slot's `seq` (enqueue.lua's KEYS[1]), then the namespace slot's `queues` registry
--       (whose `uniq` and `ids` hold the entries; the enqueue part declares no namespace slot).
-- ARGV: head (_call.lua) with the call's token, then A(1) = t, the number of take.lua's arguments,
--       those t arguments (as take.lua takes them), then enqueue.lua's arguments, to the end; or,
--       for a one-task call while layout 4 holds no data, A(1) = "=" .. the bound (take.lua's
--       A(1)), then enqueue.lua's arguments: the entries are the task's own, as the broker would
--       send them (its custom id, naming this slot's label, then its unique key, naming its id),
--       read from enqueue's A(2) and A(8), so the call carries six arguments fewer.
--       An entry written where every task of the call was stored holds the call's `now` as its
--       `since` instead of the server's TIME: its task is there from the same step, so no enqueue of
--       it is on its way, which is what the age tells a reader (docs/architecture.md).
-- Returns: enqueue.lua's reply; its refusals (CONVEYOR_QUEUEFULL, CONVEYOR_NAMESPACE) come before
--          any write, the entries' included. Or, when some entry is not free, the error
--          "CONVEYOR_TAKEN " and take.lua's answers joined by tabs (an error reply cannot hold a
--          newline), its writes made. A call sent again answers as its first send did, if that one
--          ran, and writes nothing (repeated() in _resend.lua): one key for both steps, a kept refusal
--          for TAKEN (refuse_kept()).
-- Transition: enqueue.lua's.

-- the entries of the quadruples q[from] .. q[last] as stored (false: absent), in their order: one
-- HMGET per index where there are several (a batch's), rather than a command per entry
local function read_entries(q, from, last, uniq, ids)
  if last == from + 3 then return {redis.call('HGET', q[from] == 'i' and ids or uniq, q[from + 1])} end
  local us, is = {}, {}
  for i = from, last, 4 do
    if q[i] == 'i' then is[#is + 1] = q[i + 1] else us[#us + 1] = q[i + 1] end
  end
  local uv = #us > 0 and redis.call('HMGET', uniq, unpack(us)) or us
  local iv = #is > 0 and redis.call('HMGET', ids, unpack(is)) or is
  local out, u, k = {}, 0, 0
  for i = from, last, 4 do
    if q[i] == 'i' then
      k = k + 1
      out[#out + 1] = iv[k]
    else
      u = u + 1
      out[#out + 1] = uv[u]
    end
  end
  return out
end

-- the entries of the quadruples q[from] .. q[last], every one free, written to name their task (or
-- slot) since `since`: one HSET per index
local function write_entries(q, from, last, uniq, ids, since)
  if last == from + 3 then return redis.call('HSET', q[from] == 'i' and ids or uniq, q[from + 1], q[from + 2] .. since) end
  local us, is, nu, ni = nil, nil, 0, 0
  for i = from, last, 4 do
    if q[i] == 'i' then
      is = is or {}
      is[ni + 1], is[ni + 2], ni = q[i + 1], q[i + 2] .. since, ni + 2
    else
      us = us or {}
      us[nu + 1], us[nu + 2], nu = q[i + 1], q[i + 2] .. since, nu + 2
    end
  end
  if us then call_all('HSET', uniq, us, nu) end
  if is then call_all('HSET', ids, is, ni) end
end

-- the quadruples of a one-task call's own entries (see ARGV above): its custom id's, then its key's
local function own_entries()
  local id, uk, q = A(3), A(9), {}
  if not string.find(id, '~', 1, true) then q[1], q[2], q[3], q[4] = 'i', id, LABEL, '' end
  if uk and uk ~= '' then
    local n = #q
    q[n + 1], q[n + 2], q[n + 3], q[n + 4] = 'u', string.sub(uk, 2), id, ''
  end
  return q
end

-- whether enqueue.lua's reply says it stored every task of the call: its result "" (a string reply is
-- now .. "\n" .. result; a table's result comes first)
local function stored_all(reply)
  if type(reply) == 'table' then return reply[1] == '' end
  return #reply == #NOWS + 1
end

-- each call:
local _, uniq, ids = unpack(namespace_names(KEYS[2]))
QUEUES, UNIQ = nil, nil -- the enqueue part runs as a call of its queue slot alone
local kept = repeated()
if kept then return kept end
local base, a1 = BASE, A(1)
local q, from, last, bound, v4, skip -- the quadruples q[from] .. q[last]; enqueue's A(1) is A(skip + 1)
if string.byte(a1) == 61 then -- "=": a one-task call's own entries
  q, bound, v4, skip = own_entries(), string.sub(a1, 2), '', 1
  from, last = 1, #q
else
  skip = 1 + tonumber(a1)
  q, from, last, bound, v4 = ARGV, base + 4, base + skip, A(2), A(3)
end
local entries, k = read_entries(q, from, last, uniq, ids), 0
for i = from, last, 4 do
  k = k + 1
  -- free or not is all this asks: the age an answer carries is take_entries()'s to tell
  if entry_answer(q[i], entries[k], q[i + 1], q[i + 2], q[i + 3], v4, '0', NOWS) ~= '' then -- take's step alone
    UNIQ, IDS = uniq, ids
    local answers = take_entries(q, from, last, bound, v4)
    return refuse_kept('CONVEYOR_TAKEN ' .. string.gsub(answers, '\n', '\t'))
  end
end
BASE = base + skip
local reply = op_enqueue()
if type(reply) == 'table' and reply.err then return reply end -- refused before any write
write_entries(q, from, last, uniq, ids, ' ' .. (stored_all(reply) and NOWS or server_time()))
return reply
