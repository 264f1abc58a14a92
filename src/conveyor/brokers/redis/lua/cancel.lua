-- cancel.lua: cancel a task that has not finished; a running one loses its lease with it.
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) task id.
-- Returns: the task's state after the call, or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | pending | retry | active -> archived(cancelled) (CANCELLABLE in brokers/base.py).
-- An active task's lease token is cleared with it, so its holder's later settle or extend is fenced,
-- and its id is SPUBLISHed on its queue slot's `cancels` shard channel so that its worker stops it at once.
local t = existing(A(1))
if not t then return redis.error_reply('CONVEYOR_NOTFOUND') end
local was = t.s
if was == 'scheduled' or was == 'pending' or was == 'retry' or was == 'active' then
  archive_task(t, 'cancelled', nil)
else
  return redis.error_reply('CONVEYOR_INVALID ' .. was)
end
if was == 'active' then redis.call('SPUBLISH', P .. 'cancels', t.id) end
return finish(t.s)
