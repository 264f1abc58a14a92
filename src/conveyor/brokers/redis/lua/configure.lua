-- configure.lua: store a queue's max_size, concurrency and aging (paused is kept).
-- KEYS: the queue slot's (_call.lua). The broker adds the queue to the namespace slot's registry after
--       this call (a crash between them leaves settings of a queue not listed yet, which the next
--       configure or enqueue lists; forget_queue.lua sees settings written during its steps).
-- ARGV: head (_call.lua), then A(1) queue, A(2) max_size, A(3) concurrency, A(4) aging ("" = None).
-- Returns: "ok".
-- Transition: none. When aging changes, the queue's pending tasks are re-scored (the only rescoring;
--             O(pending), done once per configuration change).
local q = A(1)
local old = settings(q).ag
redis.call('INCRBY', SEQ, 0) -- the declared key exists from now on (see _call.lua)
for i, field in ipairs({'ms', 'cc', 'ag'}) do
  if A(1 + i) == '' then redis.call('HDEL', skey(q), field) else redis.call('HSET', skey(q), field, A(1 + i)) end
end
local ag = num(A(4))
if ag ~= old then
  local key = qkey(q, 'pending')
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local t = load(idof(m))
    if t then redis.call('ZADD', key, f(ready_score(t.pr, t.ra, ag)), m) end
  end
end
return finish('ok')
