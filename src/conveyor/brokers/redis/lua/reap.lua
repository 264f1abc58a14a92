-- reap.lua: reclaim expired leases and archive expired waiting tasks (after promoting due tasks).
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) limit (leases + expiries handled), A(2) promotion budget.
-- Returns: how many leases and expiries were handled.
-- Transition: active (lease_expires_at <= now) -> pending (stalls + 1), or archived(poison) at
--             max_stalls; pending/scheduled/retry past expires_at -> archived(expired).
promote(tonumber(A(2)))
return finish(reap(tonumber(A(1))))
