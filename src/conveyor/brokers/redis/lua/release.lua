-- release.lua: free entries of the namespace slot's indexes whose tasks are gone: the second step of
-- a delete (remove_task() in _states.lua), and the claims of tasks a queue slot's enqueue then refused
-- (claims.py). A crash before it leaves an entry whose task is gone, which enqueue.lua and the
-- broker's claims already treat as free.
-- KEYS: the namespace slot's `queues` registry (begin_namespace() in _call.lua).
-- ARGV: head (_call.lua), then triples: A(1) the index, "u" (`uniq`: unique key -> "<id>[ <since>]") or
--       "i" (`ids`: custom id -> "<label> <since>"), A(2) the entry's field, A(3) what it must name
--       to be freed (the deleted task's id, or its slot's label), ...
-- Returns: how many were freed (an entry naming another task by now is left to it).
-- Transition: none.
local freed, i = 0, 1
while A(i) do
  local index = A(i) == 'i' and IDS or UNIQ
  if entry_names(redis.call('HGET', index, A(i + 1)), A(i + 2)) then
    redis.call('HDEL', index, A(i + 1))
    freed = freed + 1
  end
  i = i + 3
end
return finish(freed)
