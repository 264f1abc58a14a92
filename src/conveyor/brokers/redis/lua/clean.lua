-- clean.lua: the janitor. Bounded work: at most `limit` deletions, ZRANGE windows of that size.
-- KEYS: the queue slot's (_call.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_call.lua), then A(1) limit, A(2) max_archived (per queue), A(3) the passes to make: "kc"
--       both, "k" the first alone, "c" the second alone (a call per slot over several slots spends
--       the limit on every slot's first pass before any second, as memory:// does: broker.py),
--       A(4..) the slot's queues, in the order to visit them (the caller reads them from the registry).
-- Returns: how many tasks were deleted.
-- Transition: completed/archived past keep_until -> deleted (not reported); then the oldest archived
--             tasks beyond max_archived per queue -> deleted (not reported).
local limit, cap, passes = tonumber(A(1)), tonumber(A(2)), A(3)
local removed = 0
local queues = {}
local i = 4
while A(i) do
  queues[i - 3] = A(i)
  i = i + 1
end
local kept, capped = passes ~= 'c', passes ~= 'k'
for _, q in ipairs(kept and queues or {}) do
  for _, s in ipairs({'completed', 'archived'}) do
    if removed >= limit then break end
    local key = qkey(q, s .. ':keep')
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', NOWS, 'LIMIT', 0, limit - removed)) do
      local t = load(idof(m))
      if t and t.m == m then
        remove_task(t, false)
        removed = removed + 1
      else
        redis.call('ZREM', key, m)
        redis.call('ZREM', qkey(q, s), m)
      end
    end
  end
end
for _, q in ipairs(capped and queues or {}) do
  if removed >= limit then break end
  local excess = redis.call('ZCARD', qkey(q, 'archived')) - cap
  if excess > 0 then
    for _, m in ipairs(redis.call('ZRANGE', qkey(q, 'archived'), 0, math.min(excess, limit - removed) - 1)) do
      local t = load(idof(m))
      if t and t.m == m then remove_task(t, false) else redis.call('ZREM', qkey(q, 'archived'), m) end
      removed = removed + 1
    end
  end
end
return finish(removed)
