-- take.lua: claim entries of the namespace slot's indexes, the first step of an enqueue whose queue
-- slot is not the namespace's (the broker: claims.py): `uniq` (unique key -> "<id> <since>": the task
-- holding it) and `ids` (custom id -> "<label> <since>": the slot its task is in). An entry is written
-- where it is free or names `expected` (a holder the broker found gone, finished or past its window);
-- the queue slot's call then stores the task. `since` is the server's TIME, so an entry's age does not
-- depend on the callers' clocks.
-- KEYS: the namespace slot's `queues` registry (begin_namespace() in _lib.lua).
-- ARGV: head (_lib.lua) with the call's token, then A(1) the age in seconds past which an entry
--       counts as old, A(2) layout 4's prefix while it holds data (upgrade.py; "{ns}:v4:", this slot),
--       else "": a free
--       entry that layout 4 still holds, for a task it has, is answered as held, and young, by its
--       holder (a custom id: by ":v4", a label no queue has), so the broker refuses the task as a
--       duplicate unless the holder is `expected` (it found it finished), then
--       quadruples: the index ("u" uniq, "i" ids), the field (a unique key, escaped: no whitespace; or
--       a custom id), what the entry is to name (the claiming task's id; or its queue's label), and
--       what it may name for the claim to take it over ("" none).
-- Returns: one string, per quadruple, joined by newlines: "" (written), "=" (the entry named the
--          claimer already: its time renewed), else "<what it names> <1 if the entry is old, else 0>".
--          A call sent again (its connection lost before the reply was read) answers as its first
--          send did, if that one ran, and writes nothing (repeated() in _lib.lua): the broker then
--          knows which entries its call wrote ("", not "=") and frees them if its task is refused.
-- Transition: none.
local kept = repeated()
if kept then return kept end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local since, bound, v4 = ' ' .. string.format('%.17g', now), tonumber(A(1)), A(2)
local out, i = {}, 3
while A(i) do
  local index, field, value, expected = A(i) == 'i' and IDS or UNIQ, A(i + 1), A(i + 2), A(i + 3)
  local entry = redis.call('HGET', index, field)
  local holder, at = nil, nil
  if entry then holder, at = string.match(entry, '^(%S+) ?(%S*)$') end
  if not entry and v4 ~= '' then -- layout 4's own entry, for a task it still has
    local held = A(i) == 'i' and field or redis.call('HGET', v4 .. 'uniq', field)
    if held and redis.call('HEXISTS', v4 .. 'rows', held) == 1 then
      holder = A(i) == 'i' and ':v4' or held
      if holder ~= expected then entry, at = true, tostring(now) end
    end
  end
  if not entry or holder == expected or holder == value then
    redis.call('HSET', index, field, value .. since)
    out[#out + 1] = (holder == value and holder ~= expected) and '=' or ''
  else
    local old = at == '' or tonumber(at) + bound < now
    out[#out + 1] = holder .. (old and ' 1' or ' 0')
  end
  i = i + 4
end
return finish(table.concat(out, '\n'), true)
