-- take_enqueue.lua: take.lua's step and enqueue.lua's in one call, on one server (which checks no
-- slots, as claims and upkeep over several slots are one call there: switch() in _lib.lua): an
-- enqueue whose tasks hold unique keys or custom ids (claims.py) judges their entries in the namespace
-- slot by take's rule (entry_answer() in _lib.lua) and, when every one is free, stores the tasks by
-- enqueue's body in the queue slot and then writes the entries, as the two calls would have, without
-- the round trip between. Any other answer needs the broker to read the row of the task an entry
-- names: the call then runs take's step alone (take_entries(), as take.lua) and refuses with its
-- answers, and the broker goes on as after a take of its own. On a cluster the two steps are two
-- calls (claims.py).
-- KEYS: the queue slot's `seq` (enqueue.lua's KEYS[1]), then the namespace slot's `queues` registry
--       (whose `uniq` and `ids` hold the entries; the enqueue part declares no namespace slot).
-- ARGV: head (_lib.lua) with the call's token, then A(1) = t, the number of take.lua's arguments,
--       those t arguments (as take.lua takes them), then enqueue.lua's arguments, to the end.
-- Returns: enqueue.lua's reply; its refusals (CONVEYOR_QUEUEFULL, CONVEYOR_NAMESPACE) come before
--          any write, the entries' included. Or, when some entry is not free, the error
--          "CONVEYOR_TAKEN " and take.lua's answers joined by tabs (an error reply cannot hold a
--          newline), its writes made. A call sent again answers as its first send did, if that one
--          ran, and writes nothing (repeated() in _lib.lua): one key for both steps, a kept refusal
--          for TAKEN (refuse_kept()).
-- Transition: enqueue.lua's.

-- the entries of take's quadruples A(4) .. A(last) as stored (false: absent), in their order: one
-- HMGET per index where there are several (a batch's), rather than a command per entry
local function read_entries(last, uniq, ids)
  if last == 7 then return {redis.call('HGET', A(4) == 'i' and ids or uniq, A(5))} end
  local us, is = {}, {}
  for i = 4, last, 4 do
    if A(i) == 'i' then is[#is + 1] = A(i + 1) else us[#us + 1] = A(i + 1) end
  end
  local uv = #us > 0 and redis.call('HMGET', uniq, unpack(us)) or us
  local iv = #is > 0 and redis.call('HMGET', ids, unpack(is)) or is
  local out, u, k = {}, 0, 0
  for i = 4, last, 4 do
    if A(i) == 'i' then
      k = k + 1
      out[#out + 1] = iv[k]
    else
      u = u + 1
      out[#out + 1] = uv[u]
    end
  end
  return out
end

-- the entries of take's quadruples ARGV[from] .. ARGV[to], every one free, written to name their
-- task (or slot) since `since`: one HSET per index
local function write_entries(from, to, uniq, ids, since)
  local us, is, nu, ni = nil, nil, 0, 0
  for i = from, to, 4 do
    if ARGV[i] == 'i' then
      is = is or {}
      is[ni + 1], is[ni + 2], ni = ARGV[i + 1], ARGV[i + 2] .. since, ni + 2
    else
      us = us or {}
      us[nu + 1], us[nu + 2], nu = ARGV[i + 1], ARGV[i + 2] .. since, nu + 2
    end
  end
  if us then call_all('HSET', uniq, us, nu) end
  if is then call_all('HSET', ids, is, ni) end
end

-- each call:
local _, uniq, ids = unpack(namespace_names(KEYS[2]))
QUEUES, UNIQ = nil, nil -- the enqueue part runs as a call of its queue slot alone
local kept = repeated()
if kept then return kept end
local last = 1 + tonumber(A(1)) -- take's arguments: A(2) .. A(last)
local bound, v4, now = A(2), A(3), server_time()
local entries, k = read_entries(last, uniq, ids), 0
for i = 4, last, 4 do
  k = k + 1
  if entry_answer(A(i), entries[k], A(i + 1), A(i + 2), A(i + 3), v4, bound, now) ~= '' then -- take's step alone
    UNIQ, IDS = uniq, ids
    local answers = take_entries(4, last)
    return refuse_kept('CONVEYOR_TAKEN ' .. string.gsub(answers, '\n', '\t'))
  end
end
local base = BASE
BASE = base + last -- enqueue's A(1) is the argument after take's
local reply = op_enqueue()
if type(reply) == 'table' and reply.err then return reply end -- refused before any write
write_entries(base + 4, base + last, uniq, ids, ' ' .. now)
return reply
