-- upgrade_slot.lua: a queue slot's steps of the cluster's move of layout 4's tasks (upgrade.py: stage,
-- drop in layout 4's slot, then index or unstage). A staged task is a copy of a layout 4 task written
-- into its queue's slot (row, side data, failures) and listed in `staged`, in no index: no claim finds
-- it, and no by-id call, since the namespace slot's `ids` names no slot for it until the drop.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1) the step:
--   "stage": A(2) layout 4's enqueue counter, A(3) how many queues' settings follow, then per queue its
--            name, ms, cc, ag, pa ("" none; kept where the slot has its own), then per task: id, row,
--            result, last error, limit, traceback ("" none, else "=" .. value), n, its n failures;
--   "index": the ids the drop took out of layout 4: indexed as their rows say, out of `staged`;
--   "unstage": ids whose copies are void (layout 4 changed or lost the task): deleted.
-- Returns: how many tasks the step wrote (a stage leaves a task already in the slot and out of
--          `staged`, i.e. moved, as it is).
-- Transition: none (a staged task keeps its state, member and scores; a pending task that waited in its
-- enqueue call's group waits on its own).

local SETTING_FIELDS = {'ms', 'cc', 'ag', 'pa'}

local function side(hash, id, value)
  if value ~= '' then redis.call('HSET', hash, id, string.sub(value, 2)) end
end

local function stage()
  if tonumber(redis.call('GET', SEQ) or '0') < tonumber(A(2)) then redis.call('SET', SEQ, A(2)) end
  local i = 4
  for _ = 1, tonumber(A(3)) do
    for k, name in ipairs(SETTING_FIELDS) do
      if A(i + k) ~= '' then redis.call('HSETNX', skey(A(i)), name, A(i + k)) end
    end
    i = i + 5
  end
  local done = 0
  while A(i) do
    local id, n = A(i), tonumber(A(i + 6))
    local t = parse(id, A(i + 1))
    -- a row no version can read stays where it is; a task already moved (a late mover's copy) is kept
    local moved = redis.call('HEXISTS', ROWS, id) == 1 and redis.call('SISMEMBER', P .. 'staged', id) == 0
    if t and not moved then
      redis.call('DEL', ekey(id))
      if n > 0 then redis.call('RPUSH', ekey(id), unpack(ARGV, 4 + i + 7, 4 + i + 6 + n)) end
      t.g = nil
      save(t)
      side(RESULTS, id, A(i + 2))
      side(LASTERR, id, A(i + 3))
      side(LIMITS, id, A(i + 4))
      side(TRACEBACKS, id, A(i + 5))
      redis.call('SADD', P .. 'staged', id)
      done = done + 1
    end
    i = i + 7 + n
  end
  return done
end

local function place(keep)
  local done, i = 0, 2
  while A(i) do
    local id = A(i)
    if redis.call('SREM', P .. 'staged', id) == 1 then
      local t = keep and load(id)
      if t then
        index(t)
      else
        drop_data(id)
      end
      done = done + 1
    end
    i = i + 1
  end
  return done
end

-- each call:
local step = A(1)
if step == 'stage' then return finish(tostring(stage())) end
return finish(tostring(place(step == 'index')))
