-- claim.lua: lease up to `limit` ready tasks from the queues in the order given.
-- KEYS: the standard set (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) lease_for, A(2) limit, A(3) token base (random, from the caller),
--       A(4) maintenance budget (due tasks promoted and leases reaped first, each at most this many),
--       A(5..) queue names.
-- Returns: one JSON text (cjson: one reply string converts far faster than ~40 per task): the list of
--          claimed tasks, each [flat HGETALL as read *before* the claim, failures], in claim order ("{}"
--          when none); the caller applies the claim's writes itself (s = active, a + 1, sa = now,
--          lx = now + lease_for, tk = "<base>-<position>", c = 0), which keeps the reply short.
-- Transition: due scheduled/retry -> pending; expired leases -> pending or archived(poison);
--             pending past expires_at -> archived(expired); pending -> active (attempts + 1,
--             lease token "<base>-<i>", lease_expires_at = now + lease_for, started_at = now).
local lease_for, limit, base, budget = tonumber(A(1)), tonumber(A(2)), A(3), tonumber(A(4))
promote(budget)
reap(budget)
DEFER = true
local out = {}
local lx = NOW + lease_for
local lxs = f(lx)
local i = 5
while A(i) and #out < limit do
  local q = A(i)
  flush_z() -- the ZCARD below must see this call's own claims
  local s = settings(q)
  if not s.pa then
    local room = limit - #out
    if s.cc then room = math.min(room, s.cc - redis.call('ZCARD', qkey(q, 'active'))) end
    local kactive, kwaiting = qkey(q, 'active'), qkey(q, 'waiting')
    while room > 0 do
      local popped = redis.call('ZPOPMIN', qkey(q, 'pending'), room)
      if #popped == 0 then break end
      for j = 1, #popped, 2 do
        local m = popped[j]
        local id = idof(m)
        local flat = redis.call('HGETALL', tkey(id))
        local h = {}
        for k = 1, #flat, 2 do h[flat[k]] = flat[k + 1] end
        if h.s ~= 'pending' or h.m ~= m or not h.q then
          zop('ZREM', kwaiting, m)
        elseif num(h.x) and num(h.x) <= NOW then
          archive_task(totask(id, h), 'expired', 'Expired: not started before its deadline')
        else
          -- pending -> active, written directly (move() without the generic bookkeeping); the
          -- member left `pending` with the ZPOPMIN above
          local token = base .. '-' .. (#out + 1)
          redis.call('HSET', tkey(id), 's', 'active', 'a', tostring((num(h.a) or 0) + 1), 'sa', NOWS,
            'lx', lxs, 'tk', token, 'c', '0')
          zop('ZREM', kwaiting, m)
          if num(h.x) then zop('ZREM', EXPIRING, m) end
          zop('ZADD', kactive, NOWS, m)
          zop('ZADD', LEASES, lxs, m)
          if EMIT then event(id, 'pending', 'active', q) end
          out[#out + 1] = {flat, h.ne and redis.call('LRANGE', ekey(id), 0, -1) or {}}
          room = room - 1
        end
      end
    end
  end
  i = i + 1
end
return finish(cjson.encode(out))
