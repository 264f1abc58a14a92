-- promote.lua: move due scheduled/retry tasks to pending.
-- KEYS: the queue slot's (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) limit.
-- Returns: how many moved.
-- Transition: scheduled | retry (next_run_at <= now) -> pending (ready_at = next_run_at).
return finish(promote(tonumber(A(1))))
