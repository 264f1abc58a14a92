-- claim.lua: lease up to `limit` ready tasks from the queues in the order given.
-- KEYS: the standard set (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) lease_for, A(2) limit, A(3) token base (random, from the caller),
--       A(4) maintenance budget (due tasks promoted and leases reaped first, each at most this many),
--       A(5..) queue names.
-- Returns: a list of tasks as stored after the claim, each {flat HGETALL, failures}.
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
    while room > 0 do
      local popped = redis.call('ZPOPMIN', qkey(q, 'pending'), room)
      if #popped == 0 then break end
      for j = 1, #popped, 2 do
        local m = popped[j]
        local id = idof(m)
        local flat = redis.call('HGETALL', tkey(id))
        local h = {}
        for k = 1, #flat, 2 do h[flat[k]] = flat[k + 1] end
        local t = totask(id, h)
        if not t or t.s ~= 'pending' or t.m ~= m then
          zop('ZREM', qkey(q, 'waiting'), m)
        elseif t.x and t.x <= NOW then
          archive_task(t, 'expired', 'Expired: not started before its deadline')
        else
          t.a, t.sa, t.lx = t.a + 1, NOW, lx
          local token = base .. '-' .. (#out + 1)
          local a = tostring(t.a)
          move(t, 'active', {a = a, sa = NOWS, lx = lxs, tk = token, c = '0'}, {})
          -- the reply: the hash as read, then the fields just written (later pairs win)
          for _, v in ipairs({'s', 'active', 'a', a, 'sa', NOWS, 'lx', lxs, 'tk', token, 'c', '0'}) do
            flat[#flat + 1] = v
          end
          out[#out + 1] = {flat, h.ne and redis.call('LRANGE', ekey(id), 0, -1) or {}}
          room = room - 1
        end
      end
    end
  end
  i = i + 1
end
return finish(out)
