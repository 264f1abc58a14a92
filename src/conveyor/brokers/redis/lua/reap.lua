-- reap.lua: reclaim expired leases and archive expired waiting tasks (after promoting due tasks).
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1) limit (leases + expiries handled), A(2) promotion budget, A(3..)
--       either, on one server (which checks no slots), the `seq` keys of further queue slots to visit
--       after it (switch()): every slot's due tasks promoted within the budget, then the limit spent
--       on the earliest expired leases over all of them, then on the earliest expiries (spend()); or,
--       on a cluster, "l" or "x" and the members of this slot's expired leases ("l") or expiries
--       ("x") to handle, which the broker chose over every slot, after promoting this slot's due
--       tasks within the budget (limit unused).
-- Returns: how many leases and expiries were handled.
-- Transition: active (lease_expires_at <= now) -> pending (stalls + 1), or archived(poison) at
--             max_stalls; pending/scheduled/retry past expires_at -> archived(expired).
local BRACE = 123 -- "{": starts a slot's key, never "l" or "x"

-- each call:
local limit, budget = tonumber(A(1)), tonumber(A(2))
local kind = A(3)
if kind and string.byte(kind) ~= BRACE then
  promote(budget)
  return finish(each_member(4, kind == 'l' and reap_one or expire_one))
end
local slots = call_slots(3)
for k, seq in ipairs(slots) do
  if k > 1 then switch(seq) end
  promote(budget)
end
local done = spend(slots, FIELD_LEASES, limit, reap_one)
return finish(done + spend(slots, FIELD_EXPIRING, limit - done, expire_one))
