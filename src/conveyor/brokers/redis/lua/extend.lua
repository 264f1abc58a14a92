-- extend.lua: heartbeat, fenced by the lease token.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1) task id, A(2) token, A(3) lease_for.
-- Returns: {lease_expires_at, "1" if cancel was requested else "0"}, or false if the lease is lost.
-- Transition: none (active stays active; lease_expires_at = now + lease_for).
local t = load(A(1))
if not t or t.s ~= 'active' or t.tk ~= A(2) then return finish(false) end
t.lx = NOW + tonumber(A(3))
save(t)
redis.call('ZADD', LEASES, f(t.lx), t.m)
return finish({f(t.lx), t.c == '1' and '1' or '0'})
