-- delete.lua: remove a task that is not running.
-- KEYS: the queue slot's (_lib.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_lib.lua), then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID active.
-- Transition: any state but active -> deleted (reported).
local t = existing(A(1))
if not t then return redis.error_reply('CONVEYOR_NOTFOUND') end
if t.s == 'active' then return redis.error_reply('CONVEYOR_INVALID active') end
remove_task(t, true)
return finish('ok')
