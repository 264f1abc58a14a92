-- list.lua: a page of one queue's visible tasks in one state (read only).
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1) queue, A(2) state, A(3) offset, A(4) limit.
-- Returns: the tasks, each {row, result, last error, failures, retry limit,
--          traceback} (_rows.lua's dump()). Order:
--          pending by claim order; scheduled/retry by next_run_at; active by started_at;
--          completed/archived newest finished_at first (ties by enqueue order, reversed for the
--          finished ones), skipping tasks past keep_until.
-- Transition: none.
local q, s, offset, limit = A(1), A(2), tonumber(A(3)), tonumber(A(4))
local out = {}
if limit <= 0 then return finish(out) end
if s ~= 'completed' and s ~= 'archived' then
  for _, m in ipairs(redis.call('ZRANGE', qkey(q, s), offset, offset + limit - 1)) do
    local d = dump(idof(m))
    if d then out[#out + 1] = d end
  end
  return finish(out)
end
local key, start, skip, window = qkey(q, s), 0, offset, 256
while #out < limit do
  local members = redis.call('ZREVRANGE', key, start, start + window - 1)
  if #members == 0 then break end
  for _, m in ipairs(members) do
    local id = idof(m)
    local t = load(id)
    if t and t.ku and NOW < t.ku then
      if skip > 0 then
        skip = skip - 1
      elseif #out < limit then
        out[#out + 1] = dump(id) or nil
      end
    end
  end
  start = start + window
end
return finish(out)
