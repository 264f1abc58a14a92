-- forget_queue.lua: forget an empty queue (its settings and its name in QUEUES).
-- KEYS: the queue slot's and the namespace slot's (_lib.lua): the queue leaves QUEUES.
-- ARGV: head (_lib.lua), then A(1) queue.
-- Returns: "unknown" (no such queue), "forgotten", or the number of tasks it still holds (as a string;
--          nothing is changed then).
-- Transition: none.
local q = A(1)
if redis.call('SISMEMBER', QUEUES, q) == 0 and redis.call('EXISTS', skey(q)) == 0 then
  return finish('unknown')
end
local held = 0
for _, s in ipairs({'scheduled', 'pending', 'active', 'retry', 'completed', 'archived'}) do
  held = held + redis.call('ZCARD', qkey(q, s))
end
if held > 0 then return finish(tostring(held)) end
redis.call('DEL', skey(q), qkey(q, 'waiting'), qkey(q, 'groups'), qkey(q, 'completed:keep'), qkey(q, 'archived:keep'))
redis.call('SREM', QUEUES, q)
return finish('forgotten')
