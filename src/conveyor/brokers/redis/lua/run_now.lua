-- run_now.lua: make a waiting or archived task runnable now.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) task id.
-- Returns: "ok", or the errors CONVEYOR_NOTFOUND / CONVEYOR_INVALID <state>.
-- Transition: scheduled | retry -> pending; archived -> pending (retries, stalls and the archive
--             fields reset); an expiry already past is lifted (transitions.run_now says why).
-- A call sent again (its connection lost before the reply was read) answers as its first send did,
-- if that one ran, and writes nothing (repeated() in _resend.lua); a refusal keeps nothing.
local kept = repeated()
if kept then return kept end
local t = existing(A(1))
if not t then return forget_sent(redis.error_reply('CONVEYOR_NOTFOUND')) end
if t.x and t.x <= NOW and (t.s == 'scheduled' or t.s == 'retry' or t.s == 'archived') then
  t.x = nil -- unindexed from EXPIRING by the move below, which reads the old state, not t.x
end
if t.s == 'scheduled' or t.s == 'retry' then
  make_pending(t, NOW)
elseif t.s == 'archived' then
  t.r, t.st, t.ar, t.fa, t.ku = 0, 0, nil, nil, nil
  make_pending(t, NOW)
else
  return forget_sent(redis.error_reply('CONVEYOR_INVALID ' .. t.s))
end
return finish('ok', true)
