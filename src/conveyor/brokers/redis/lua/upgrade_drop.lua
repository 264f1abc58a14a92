-- upgrade_drop.lua: layout 4's step of the cluster's move (upgrade.py, after upgrade_slot.lua's stage):
-- each task whose row is still the one copied leaves layout 4 (its indexes, row and side data), and
-- the namespace slot, which is layout 4's slot too, names its queue slot in `ids` and gives its unique
-- key's entry to it in `uniq`, in the same step: from here on by-id calls go to the copy.
-- KEYS: layout 4's slot (its `seq`, "{ns}:v4:seq", _call.lua).
-- ARGV: head (_call.lua), then A(1) the namespace, A(2) the mover's lock token, then per task: id, the
--       row as copied, its label.
-- A task whose id already has an entry in `ids` is a second task of that id, which the version
-- before's enqueue stored because it cannot see layout 5: the duplicate this version refuses, dropped
-- and not listed, so that its copy is unstaged (upgrade.lua does the same on one server).
-- Returns: "lost" when the lock ({ns}:v5:moving, this slot's) is not the mover's any more: nothing
--          dropped (the holder's recovery settles the copies); else "ok", then the ids taken out of
--          layout 4 for their copies, one per line.
-- Transition: none.

-- each call:
local np = '{' .. A(1) .. '}:v5:'
if redis.call('GET', np .. 'moving') ~= A(2) then return finish('lost') end
local out, i = {'ok'}, 3
while A(i) do
  local id, copied, label = A(i), A(i + 1), A(i + 2)
  local t = redis.call('HGET', ROWS, id) == copied and parse(id, copied)
  if t then -- (a row no version can read was not staged either: it stays)
    unindex(t)
    drop_data(id)
    local first = redis.call('HSETNX', np .. 'ids', id, label .. ' ' .. NOWS) == 1
    if t.uk and entry_names(redis.call('HGET', P .. 'uniq', t.uk), id) then
      redis.call('HDEL', P .. 'uniq', t.uk)
      if first then redis.call('HSETNX', np .. 'uniq', t.uk, id .. ' ' .. NOWS) end
    end
    if first then out[#out + 1] = id end
  end
  i = i + 3
end
return finish(table.concat(out, '\n'))
