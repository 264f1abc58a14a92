-- claim.lua: lease up to `limit` ready tasks from the queues in the order given.
-- KEYS: the standard one (_lib.lua).
-- ARGV: head (_lib.lua), then A(1) lease_for, A(2) limit, A(3) token base (random, from the caller),
--       A(4) maintenance budget (due tasks promoted and leases reaped first, each at most this many),
--       A(5..) queue names.
-- Returns: one JSON text (cjson: one reply string converts far faster than ~20 per task): a flat array
--          of 15 values per claimed task, in claim order ("{}" when none): id, name, queue, payload,
--          options, priority, enqueued_at, first_due_at, expires_at, unique_key, attempts before this
--          claim, retries, stalls, last_error, failures (an array of "attempt\tat\terror"); false
--          stands for an absent value. The caller knows the claim's own writes (s = active, a + 1,
--          sa = now, lx = now + lease_for, tk = "<base>-<position>"), which keeps the reply short.
-- Transition: due scheduled/retry -> pending; expired leases -> pending or archived(poison);
--             pending past expires_at -> archived(expired); pending -> active (attempts + 1,
--             lease token "<base>-<i>", lease_expires_at = now + lease_for, started_at = now).
local lease_for, limit, base, budget = tonumber(A(1)), tonumber(A(2)), A(3), tonumber(A(4))
promote(budget)
reap(budget)
DEFER = true
local out = {}
local claimed = 0
local lxs = f(NOW + lease_for)
local i = 5
while A(i) and claimed < limit do
  local q = A(i)
  flush_z() -- the ZCARD below must see this call's own claims
  local s = settings(q)
  if not s.pa then
    local room = limit - claimed
    if s.cc then room = math.min(room, s.cc - redis.call('ZCARD', qkey(q, 'active'))) end
    local kactive, kwaiting = qkey(q, 'active'), qkey(q, 'waiting')
    while room > 0 do
      local popped = redis.call('ZPOPMIN', qkey(q, 'pending'), room)
      if #popped == 0 then break end
      for j = 1, #popped, 2 do
        local m = popped[j]
        local id = idof(m)
        local key = tkey(id)
        -- exactly the fields the reply needs, in a fixed order (no keys travel, no table to build)
        local v = redis.call('HMGET', key, 's', 'm', 'q', 'x', 'a', 'n', 'p', 'o', 'pr', 'ea', 'fd', 'r', 'st', 'uk',
          'le', 'ne', 'c')
        local x = num(v[4])
        if v[1] ~= 'pending' or v[2] ~= m or not v[3] then
          zop('ZREM', kwaiting, m)
        elseif x and x <= NOW then
          archive_task(load(id), 'expired', 'Expired: not started before its deadline')
        else
          -- pending -> active, written directly (move() without the generic bookkeeping); the
          -- member left `pending` with the ZPOPMIN above. c (cancel requested) is reset only if set.
          claimed = claimed + 1
          local attempts = tostring((num(v[5]) or 0) + 1)
          if v[17] == '1' then
            redis.call('HSET', key, 's', 'active', 'a', attempts, 'sa', NOWS, 'lx', lxs, 'tk', base .. '-' .. claimed,
              'c', '0')
          else
            redis.call('HSET', key, 's', 'active', 'a', attempts, 'sa', NOWS, 'lx', lxs, 'tk', base .. '-' .. claimed)
          end
          zop('ZREM', kwaiting, m)
          if x then zop('ZREM', EXPIRING, m) end
          zop('ZADD', kactive, NOWS, m)
          zop('ZADD', LEASES, lxs, m)
          if EMIT then event(id, 'pending', 'active', q) end
          local n = #out
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, v[6], v[3], v[7], v[8]
          out[n + 6], out[n + 7], out[n + 8], out[n + 9], out[n + 10] = v[9], v[10], v[11], v[4], v[14]
          out[n + 11], out[n + 12], out[n + 13], out[n + 14] = v[5], v[12], v[13], v[15]
          out[n + 15] = v[16] and redis.call('LRANGE', ekey(id), 0, -1) or false
          room = room - 1
        end
      end
    end
  end
  i = i + 1
end
return finish(cjson.encode(out))
