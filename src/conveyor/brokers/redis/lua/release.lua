-- release.lua: free the unique keys of tasks a call in their queue slot deleted: the second step of
-- a delete (remove_task() in _lib.lua), in the namespace slot. A crash before it leaves an entry whose
-- holder is gone, which enqueue.lua and the broker's claims (claims.py) already treat as free. Also the
-- claims of tasks a queue slot's enqueue then refused (QueueFull, a duplicate id): freed at once.
-- KEYS: the namespace slot's `queues` registry (begin_namespace() in _lib.lua).
-- ARGV: head (_lib.lua), then pairs: A(1) a unique key, A(2) the id of the deleted task that held it, ...
-- Returns: how many were freed (a key another task holds by now is left to it).
-- Transition: none.
local freed, i = 0, 1
while A(i) do
  if entry_names(redis.call('HGET', UNIQ, A(i)), A(i + 1)) then
    redis.call('HDEL', UNIQ, A(i))
    freed = freed + 1
  end
  i = i + 2
end
return finish(freed)
