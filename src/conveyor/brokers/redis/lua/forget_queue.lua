-- forget_queue.lua: forget an empty queue, in its queue slot; the broker takes it out of the namespace
-- slot's registry between the two steps (docs/architecture.md, "Redis Cluster: keys per queue"):
--   "mark": unless the queue holds tasks, delete its settings and leave the marker `fg` (a deadline)
--           in its settings hash: until the marker is gone or past, an enqueue registers the queue
--           again on every call (enqueue.lua: register), so a registration that the broker's SREM
--           may have undone is made again;
--   "finish" (after the SREM): take the marker away; answer "again" when the queue came back meanwhile
--           (tasks, settings, `kn`): the broker then adds it to the registry again.
-- Both steps add one to the queue's forget counter `fc` (kept in its settings hash when the rest goes):
-- an enqueue refused for a missing registration names it, and its SADD counts for the call sent
-- again only while the counter is unchanged (enqueue.lua: register).
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua; now "": the server's TIME), then A(1) queue, A(2) step ("mark" or "finish"),
--       for "mark" A(3) "1" when the registry holds the queue and A(4) how long the marker holds
--       (seconds), for "finish" A(3) the marker "mark" answered.
-- Returns: "mark": "unknown" (no such queue), the number of tasks it still holds (as a string; nothing
--          is changed then), or "marked <marker>"; "finish": "forgotten" or "again".
-- Transition: none.
local q = A(1)
local held = 0
for _, s in ipairs({'scheduled', 'pending', 'active', 'retry', 'completed', 'archived'}) do
  held = held + redis.call('ZCARD', qkey(q, s))
end
if A(2) == 'finish' then
  local fields = redis.call('HGETALL', skey(q))
  local back, marker = held > 0, nil
  for i = 1, #fields, 2 do
    if fields[i] == 'fg' then marker = fields[i + 1] elseif fields[i] ~= 'fc' then back = true end
  end
  if marker == A(3) then redis.call('HDEL', skey(q), 'fg') end
  redis.call('HINCRBY', skey(q), 'fc', 1)
  return finish(back and 'again' or 'forgotten')
end
local count = redis.call('HGET', skey(q), 'fc')
if A(3) ~= '1' and held == 0 and redis.call('HLEN', skey(q)) == (count and 1 or 0) then return finish('unknown') end
if held > 0 then return finish(tostring(held)) end
redis.call('DEL', skey(q), qkey(q, 'waiting'), qkey(q, 'groups'), qkey(q, 'completed:keep'), qkey(q, 'archived:keep'))
local marker = f(NOW + tonumber(A(4)))
redis.call('HSET', skey(q), 'fg', marker, 'fc', (tonumber(count) or 0) + 1)
return finish('marked ' .. marker)
