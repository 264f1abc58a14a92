-- delete.lua: remove a task that is not running.
-- KEYS: the queue slot's (_call.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID active.
-- Transition: any state but active -> deleted (reported).
-- A call sent again (its connection lost before the reply was read) answers as its first send did,
-- if that one ran, and writes nothing (repeated() in _resend.lua; the unique keys it freed
-- come back only from the first); a refusal keeps nothing.
local kept = repeated()
if kept then return kept end
local t = existing(A(1))
if not t then return forget_sent(redis.error_reply('CONVEYOR_NOTFOUND')) end
if t.s == 'active' then return forget_sent(redis.error_reply('CONVEYOR_INVALID active')) end
remove_task(t, true)
return finish('ok', true)
