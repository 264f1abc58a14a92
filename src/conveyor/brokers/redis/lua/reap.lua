-- reap.lua: reclaim expired leases and archive expired waiting tasks (after promoting due tasks).
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) limit (leases + expiries handled), A(2) promotion budget, A(3..) on
--       one server (which checks no slots) the `seq` keys of further queue slots to visit after it
--       (switch()), each promoted within the budget, all reaped within the same limit.
-- Returns: how many leases and expiries were handled.
-- Transition: active (lease_expires_at <= now) -> pending (stalls + 1), or archived(poison) at
--             max_stalls; pending/scheduled/retry past expires_at -> archived(expired).
local limit, budget = tonumber(A(1)), tonumber(A(2))
promote(budget)
local done = reap(limit)
local i = 3
while A(i) and done < limit do
  switch(A(i))
  promote(budget)
  done = done + reap(limit - done)
  i = i + 1
end
return finish(done)
