-- run_now.lua: make a waiting or archived task runnable now.
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | retry -> pending; archived -> pending (retries, stalls and the archive
--             fields reset).
local t = existing(A(1))
if not t then return redis.error_reply('CONVEYOR_NOTFOUND') end
if t.s == 'scheduled' or t.s == 'retry' then
  make_pending(t, NOW)
elseif t.s == 'archived' then
  t.r, t.st, t.ar, t.fa, t.ku = 0, 0, nil, nil, nil
  make_pending(t, NOW)
else
  return redis.error_reply('CONVEYOR_INVALID ' .. t.s)
end
return finish('ok')
