-- archive.lua: an operator dead-letters a waiting task.
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | pending | retry -> archived(manual).
local t = existing(A(1))
if not t then return redis.error_reply('CONVEYOR_NOTFOUND') end
if t.s ~= 'scheduled' and t.s ~= 'pending' and t.s ~= 'retry' then
  return redis.error_reply('CONVEYOR_INVALID ' .. t.s)
end
archive_task(t, 'manual', nil)
return finish('ok')
