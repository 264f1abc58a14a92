-- withdraw.lua: take back tasks an enqueue just stored, those no worker has claimed yet (replication.py
-- calls it when fewer replicas than wait_replicas confirmed the enqueue).
-- KEYS: the queue slot's (_lib.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_lib.lua), then A(1).. the ids the enqueue stored.
-- Returns: one string, per id "1" (removed) or "0" (left: claimed at least once, finished, or gone),
--          in order, without separators.
-- Transition: pending or scheduled, never claimed -> deleted (reported). Any other state is left as it
--             is: a task a worker already took has started, and removing it would not undo that.
local out = {}
local i = 1
while A(i) do
  local t = load(A(i))
  if t and (t.s == 'pending' or t.s == 'scheduled') and t.a == 0 and t.st == 0 then
    remove_task(t, true)
    out[i] = '1'
  else
    out[i] = '0'
  end
  i = i + 1
end
return finish(table.concat(out))
