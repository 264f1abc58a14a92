-- take.lua: claim entries of the namespace slot's `uniq` index (unique key -> "<id> <since>"), the
-- first step of an enqueue whose queue slot is not the namespace's (the broker: claims.py). An entry
-- is written where the key is free or its entry names `expected` (a holder the broker found finished,
-- past its unique_until, or never stored); the queue slot's call then stores the task. `since` is the
-- server's TIME, so an entry's age does not depend on the callers' clocks.
-- KEYS: the namespace slot's `queues` registry (begin_namespace() in _lib.lua).
-- ARGV: head (_lib.lua), then A(1) the age in seconds past which an entry counts as old, then triples:
--       a unique key (escaped: no whitespace), the id of the task claiming it, the id its entry may
--       name for the claim to take it over ("" none).
-- Returns: one string, per triple, joined by newlines: "" (written), "=" (the entry named the claiming
--          task already: its time renewed), else "<holder id> <1 if the entry is old, else 0>".
-- Transition: none.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local since, bound = ' ' .. string.format('%.17g', now), tonumber(A(1))
local out, i = {}, 2
while A(i) do
  local key, id, expected = A(i), A(i + 1), A(i + 2)
  local entry = redis.call('HGET', UNIQ, key)
  local holder, at = nil, nil
  if entry then holder, at = string.match(entry, '^(%S+) ?(%S*)$') end
  if not entry or holder == expected or holder == id then
    redis.call('HSET', UNIQ, key, id .. since)
    out[#out + 1] = (holder == id and holder ~= expected) and '=' or ''
  else
    local old = at == '' or tonumber(at) + bound < now
    out[#out + 1] = holder .. (old and ' 1' or ' 0')
  end
  i = i + 3
end
return finish(table.concat(out, '\n'))
