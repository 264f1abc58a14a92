-- promote.lua: move due scheduled/retry tasks to pending.
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) limit, A(2..) on one server (which checks no slots) the `seq` keys of
--       further queue slots to visit after it (switch()), within the same limit.
-- Returns: how many moved.
-- Transition: scheduled | retry (next_run_at <= now) -> pending (ready_at = next_run_at).
local limit = tonumber(A(1))
local moved = promote(limit)
local i = 2
while A(i) and moved < limit do
  switch(A(i))
  moved = moved + promote(limit - moved)
  i = i + 1
end
return finish(moved)
