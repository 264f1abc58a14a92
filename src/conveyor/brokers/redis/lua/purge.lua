-- purge.lua: delete visible tasks of one queue in one state (not active), oldest enqueued first.
-- KEYS: the queue slot's (_call.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_call.lua), then A(1) queue, A(2) state, A(3) limit (-1: all).
-- Returns: how many were deleted.
-- Transition: scheduled | pending | retry | completed | archived -> deleted (reported, in enqueue
--             order). An admin operation: O(n log n) in the tasks of that state, in one call.
local q, s, limit = A(1), A(2), tonumber(A(3))
local members
if s == 'completed' or s == 'archived' then
  members = redis.call('ZRANGEBYSCORE', qkey(q, s .. ':keep'), '(' .. NOWS, '+inf')
else
  members = redis.call('ZRANGE', qkey(q, s), 0, -1)
end
table.sort(members) -- members start with the zero-padded enqueue sequence
DEFER = true -- no sorted set is read below
local removed = 0
for _, m in ipairs(members) do
  if limit >= 0 and removed >= limit then break end
  local t = load(idof(m))
  if t and t.m == m and t.s == s then
    remove_task(t, true)
    removed = removed + 1
  else
    zop('ZREM', qkey(q, s), m)
  end
end
return finish(removed)
