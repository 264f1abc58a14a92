-- archive.lua: an operator dead-letters a waiting task.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | pending | retry -> archived(manual).
-- A call sent again (its connection lost before the reply was read) answers as its first send did,
-- if that one ran, and writes nothing (repeated() in _resend.lua); a refusal keeps nothing.
local kept = repeated()
if kept then return kept end
local t = existing(A(1))
if not t then return forget_sent(redis.error_reply('CONVEYOR_NOTFOUND')) end
if t.s ~= 'scheduled' and t.s ~= 'pending' and t.s ~= 'retry' then
  return forget_sent(redis.error_reply('CONVEYOR_INVALID ' .. t.s))
end
archive_task(t, 'manual', nil)
return finish('ok', true)
