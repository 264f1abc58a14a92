-- withdraw.lua: take back tasks an enqueue just stored, those no worker has claimed yet (replication.py
-- calls it when fewer replicas than wait_replicas confirmed the enqueue).
-- KEYS: the queue slot's (_call.lua); the unique keys of deleted tasks come back to be freed
--       (release.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1).. the ids the enqueue stored.
-- Returns: one string, per id "1" (removed), "0" (left: claimed at least once, or finished) or "2"
--          (gone: deleted meanwhile, finished and not kept, or lost), in order, without separators.
--          A call sent again (its connection lost before the reply was read) answers as its first
--          send did, if that one ran, and writes nothing (repeated() in _resend.lua): the tasks it
--          removed are not answered as left (started).
-- Transition: pending or scheduled, never claimed -> deleted (reported). Any other state is left as it
--             is: a task a worker already took has started, and removing it would not undo that.
local kept = repeated()
if kept then return kept end
local out = {}
local i = 1
while A(i) do
  local t = load(A(i))
  if not t then
    out[i] = '2'
  elseif (t.s == 'pending' or t.s == 'scheduled') and t.a == 0 and t.st == 0 then
    remove_task(t, true)
    out[i] = '1'
  else
    out[i] = '0'
  end
  i = i + 1
end
return finish(table.concat(out), true)
