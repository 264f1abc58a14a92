-- stats.lua: the settings and visible counts of queues of one slot (read only).
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1..) the queues (the caller reads them from the registry); on one server
--       (which checks no slots) the `seq` key of another queue slot may come between them: the queues
--       after it are that slot's (switch()).
-- Returns: per queue {name, max_size, concurrency, aging, paused, scheduled, pending, active, retry,
--          completed, archived, oldest ready_at of a pending task}; "" stands for None.
-- Transition: none.

local BRACE = 123 -- "{": starts a slot's key, never a queue name

local function counts(q)
  local v = redis.call('HMGET', skey(q), 'ms', 'cc', 'ag', 'pa')
  local row = {q, v[1] or '', v[2] or '', v[3] or '', v[4] or '0'}
  for _, s in ipairs({'scheduled', 'pending', 'active', 'retry'}) do
    row[#row + 1] = redis.call('ZCARD', qkey(q, s))
  end
  for _, s in ipairs({'completed', 'archived'}) do
    row[#row + 1] = redis.call('ZCARD', qkey(q, s)) - redis.call('ZCOUNT', qkey(q, s .. ':keep'), '-inf', NOWS)
  end
  local oldest = redis.call('ZRANGE', qkey(q, 'waiting'), 0, 0, 'WITHSCORES')
  row[#row + 1] = oldest[2] or ''
  return row
end

-- each call:
local out = {}
local i = 1
while A(i) do
  local q = A(i)
  if string.byte(q) == BRACE then switch(q) else out[#out + 1] = counts(q) end
  i = i + 1
end
return finish(out)
