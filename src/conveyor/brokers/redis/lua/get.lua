-- get.lua: one task as stored, by id (read only): the broker's `get` in one call.
-- KEYS: the queue slot's (_call.lua), the task's slot as the caller found it; or, with A(2), the
--       namespace slot's `seq` (layout 5 on one server, a custom id: the script finds the slot).
-- ARGV: head (_call.lua), then A(1) the task id; A(2), only for a custom id on one server (which checks
--       no slots): the prefix of layout 4's slot, read when the id has no entry in the namespace slot's
--       `ids` while layout 4's registry exists (upgrade.py; the move is one call there, so the entry and
--       the task are read at one instant).
-- Returns: {row, result, last error, failures, retry limit, traceback} (_rows.lua's dump()); the row
--          alone, a string, when the rest is absent (a table reply costs the server more than the
--          reads: docs/performance-notes.md, "One call per get"); "" when the slot holds no such
--          task. The caller checks keep_until.
-- Transition: none.
local id, old = A(1), A(2)
if old then
  local entry = redis.call('HGET', P .. 'ids', id)
  if entry then -- "<label> <since>": the queue slot of the label, "{ns|label}:v5:"
    local ns, rest = string.match(P, '^{([^}]*)}(.*)$')
    switch('{' .. ns .. '|' .. string.match(entry, '^[^ ]*') .. '}' .. rest .. 'seq')
  elseif old ~= '' and redis.call('EXISTS', old .. 'queues') == 1 then
    switch(old .. 'seq')
  else
    return finish('')
  end
end
local d = dump(id)
if not d then return finish('') end
if not (d[2] or d[3] or d[5] or d[6]) and #d[4] == 0 then return finish(d[1]) end
return finish(d)
