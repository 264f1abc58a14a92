-- take.lua: claim entries of the namespace slot's indexes, the first step of an enqueue whose queue
-- slot is not the namespace's (the broker: claims.py): `uniq` (unique key -> "<id> <since>": the task
-- holding it) and `ids` (custom id -> "<label> <since>": the slot its task is in). An entry is written
-- where it is free or names `expected` (a holder the broker found gone, finished or past its window);
-- the queue slot's call then stores the task. The rule is entry_answer()'s (_entries.lua), the loop
-- take_entries()'s, which take_enqueue.lua shares; `since` is the server's TIME (server_time()).
-- KEYS: the namespace slot's `queues` registry (begin_namespace() in _call.lua).
-- ARGV: head (_call.lua) with the call's token, then A(1) the age in seconds past which an entry
--       counts as old, A(2) layout 4's prefix while it holds data (upgrade.py; "{ns}:v4:", this slot),
--       else "": a free
--       entry that layout 4 still holds, for a task it has, is answered as held, and young, by its
--       holder (a custom id: by ":v4", a label no queue has), so the broker refuses the task as a
--       duplicate unless the holder is `expected` (it found it finished), then
--       quadruples: the index ("u" uniq, "i" ids), the field (a unique key, escaped: no whitespace; or
--       a custom id), what the entry is to name (the claiming task's id; or its queue's label), and
--       what it may name for the claim to take it over ("" none).
-- Returns: one string, per quadruple, joined by newlines: "" (written), "=" (the entry named the
--          claimer already: its time renewed), else "<what it names> <1 if the entry is old, else 0>".
--          A call sent again (its connection lost before the reply was read) answers as its first
--          send did, if that one ran, and writes nothing (repeated() in _resend.lua): the broker then
--          knows which entries its call wrote ("", not "=") and frees them if its task is refused.
-- Transition: none.
local kept = repeated()
if kept then return kept end
return finish(take_entries(ARGV, BASE + 3, #ARGV, A(1), A(2)), true)
