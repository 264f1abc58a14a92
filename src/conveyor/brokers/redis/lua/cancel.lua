-- cancel.lua: cancel a task that has not finished; a running one loses its lease with it.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) task id.
-- Returns: the task's state after the call, or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | pending | retry | active -> archived(cancelled) (CANCELLABLE in brokers/base.py).
-- A call sent again (its connection lost before the reply was read) answers as its first send did,
-- if that one ran, and writes nothing (repeated() in _resend.lua); a refusal keeps nothing.
-- An active task's lease token is cleared with it, so its holder's later settle or extend is fenced,
-- and its id is SPUBLISHed on its queue slot's `cancels` shard channel so that its worker stops it at once.
local kept = repeated()
if kept then return kept end
local t = existing(A(1))
if not t then return forget_sent(redis.error_reply('CONVEYOR_NOTFOUND')) end
local was = t.s
if was == 'scheduled' or was == 'pending' or was == 'retry' or was == 'active' then
  archive_task(t, 'cancelled', nil)
else
  return forget_sent(redis.error_reply('CONVEYOR_INVALID ' .. was))
end
if was == 'active' then redis.call('SPUBLISH', P .. 'cancels', t.id) end
return finish(t.s, true)
