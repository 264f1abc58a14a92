-- promote.lua: move due scheduled/retry tasks to pending.
-- KEYS: the queue slot's (_call.lua).
-- ARGV: head (_call.lua), then A(1) limit, A(2..) either, on one server (which checks no slots), the
--       `seq` keys of further queue slots to visit after it (switch()), within the same limit, spent
--       on the earliest due over all of them (spend()); or, on a cluster, the members of this slot's
--       due tasks to promote, which the broker chose over every slot (limit unused).
-- Returns: how many moved.
-- Transition: scheduled | retry (next_run_at <= now) -> pending (ready_at = next_run_at).
local BRACE = 123 -- "{": starts a slot's key, never a member

-- each call:
if A(2) and string.byte(A(2)) ~= BRACE then return finish(each_member(2, promote_one)) end
return finish(spend(call_slots(2), FIELD_DUE, tonumber(A(1)), promote_one))
