-- settle.lua: apply execution outcomes, each fenced by its lease token (compare-and-set).
-- KEYS: the standard set (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) = n, then per outcome 8 values: task id, token, kind
--       (complete|retry|archive|release), result (opt), error (opt), run_at ("" none), reason (opt),
--       keep_for.
-- Returns: per outcome 1 (applied) or 0 (task missing, not active, or another token holds it).
-- Transition: active -> completed (result, keep_until = now + keep_for) | retry (retries + 1, at
--             run_at or now, error recorded) | archived (reason, default failed; error recorded) |
--             pending, or scheduled if run_at > now (release: the attempt is given back).
local n = tonumber(A(1))
local applied = {}
DEFER = true -- no sorted set is read below
for i = 0, n - 1 do
  local b = 2 + i * 8
  local t = load(A(b))
  local kind = A(b + 2)
  if not t or t.s ~= 'active' or t.tk ~= A(b + 1) then
    applied[i + 1] = 0
  else
    local result, err, run_at, reason = opt(A(b + 3)), opt(A(b + 4)), num(A(b + 5)), opt(A(b + 6))
    if kind == 'complete' then
      local set = {}
      if result then set.res = result end
      finish_task(t, 'completed', tonumber(A(b + 7)), set, {'le'})
    elseif kind == 'retry' then
      err = err or 'Retry'
      t.r, t.nr = t.r + 1, run_at or NOW
      add_error(t, err)
      move(t, 'retry', {r = tostring(t.r), nr = f(t.nr), le = err, c = '0'}, {'tk', 'lx'})
    elseif kind == 'archive' then
      archive_task(t, reason or 'failed', err)
    else
      local set = {a = tostring(math.max(0, t.a - 1)), c = '0'}
      t.a = math.max(0, t.a - 1)
      if err then set.le = err end
      if run_at and run_at > NOW then
        t.nr = run_at
        set.nr = f(run_at)
        move(t, 'scheduled', set, {'tk', 'lx'})
      else
        make_pending(t, NOW, set, {})
      end
    end
    applied[i + 1] = 1
  end
end
return finish(applied)
