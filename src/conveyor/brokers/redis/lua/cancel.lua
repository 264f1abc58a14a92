-- cancel.lua: cancel a waiting task, or ask a running one to stop.
-- KEYS: the standard one (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) task id.
-- Returns: the task's state after the call, or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | pending | retry -> archived(cancelled); active: cancel_requested set.
local t = existing(A(1))
if not t then return redis.error_reply('CONVEYOR_NOTFOUND') end
if t.s == 'active' then
  t.c = '1'
  save(t)
elseif t.s == 'scheduled' or t.s == 'pending' or t.s == 'retry' then
  archive_task(t, 'cancelled', nil)
else
  return redis.error_reply('CONVEYOR_INVALID ' .. t.s)
end
return finish(t.s)
