-- _upkeep.lua: upkeep: due scheduled/retry tasks promoted, expired leases reaped, waiting tasks past
-- their deadline expired, one entry at a time (promote_one() and so on), within a budget, over the
-- slots of one call (spend(); promote.lua, reap.lua) or over the members a broker chose (each_member()).

-- The upkeep of one entry of the current slot's DUE, LEASES or EXPIRING (member m, due by NOW): 1 if
-- it moved its task, else 0 (an entry whose task is no longer there, in that state, is dropped).
-- due scheduled/retry -> pending (ready_at = next_run_at)
local function promote_one(m)
  local t = load(idof(m))
  if t and (t.s == 'scheduled' or t.s == 'retry') and t.m == m and t.nr and t.nr <= NOW then
    make_pending(t, t.nr)
    return 1
  end
  if not (t and t.m == m and (t.s == 'scheduled' or t.s == 'retry')) then redis.call('ZREM', DUE, m) end
  return 0
end
-- an expired lease: pending again (stalls + 1), or archived poison at max_stalls
local function reap_one(m)
  local t = load(idof(m))
  if t and t.s == 'active' and t.m == m and t.lx and t.lx <= NOW then
    local lx = t.lx
    t.st = t.st + 1
    local err = (string.gsub(LEASE_EXPIRED_ERROR, '{stalls}', t.st))
    if t.st >= max_stalls() then
      archive_task(t, 'poison', err)
    else
      add_error(t, err)
      make_pending(t, lx, err)
    end
    return 1
  end
  if not (t and t.m == m and t.s == 'active') then redis.call('ZREM', LEASES, m) end
  return 0
end
-- a waiting task past its expires_at: archived expired
local function expire_one(m)
  local t = load(idof(m))
  if t and (t.s == 'pending' or t.s == 'scheduled' or t.s == 'retry') and t.m == m and t.x and t.x <= NOW then
    archive_task(t, 'expired', EXPIRED_ERROR)
    return 1
  end
  if not (t and t.m == m and (t.s == 'pending' or t.s == 'scheduled' or t.s == 'retry')) then
    redis.call('ZREM', EXPIRING, m)
  end
  return 0
end

-- up to n entries of the current slot's sorted set `key` due by NOW, earliest first, each by `one`
local function upkeep(key, n, one)
  local done = 0
  if n <= 0 then return 0 end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', NOWS, 'LIMIT', 0, n)) do done = done + one(m) end
  return done
end

-- promote up to n due scheduled/retry tasks (ready_at = next_run_at)
local function promote(n)
  return upkeep(DUE, n, promote_one)
end

-- reclaim up to n expired leases, then archive expired waiting tasks (within the same budget)
local function reap(n)
  local done = upkeep(LEASES, n, reap_one)
  return done + upkeep(EXPIRING, n - done, expire_one)
end

-- Upkeep over the queue slots of one call (promote.lua, reap.lua): `slots`, their `seq` keys, the
-- first the call's own. A budget too small for every due entry goes to the earliest first over all
-- of them, ties by member (the sequence number, then the id), as memory:// spends it over every queue;
-- each slot's entries are handled in its turn, in that order. `field`: DUE (2), LEASES (3) or
-- EXPIRING (4), a place in names(); `one`: promote_one, reap_one or expire_one. How many it moved.
local FIELD_DUE, FIELD_LEASES, FIELD_EXPIRING = 2, 3, 4
local function earlier(x, y)
  if x[1] ~= y[1] then return x[1] < y[1] end
  return x[2] < y[2]
end
local function spend(slots, field, n, one)
  if n <= 0 then return 0 end
  local here = SEQ
  local function go(seq)
    if seq ~= here then
      switch(seq)
      here = seq
    end
  end
  local total = 0
  if #slots > 1 then
    for _, seq in ipairs(slots) do
      total = total + redis.call('ZCOUNT', names(seq)[field], '-inf', NOWS)
      if total > n then break end
    end
  end
  local done = 0
  if total <= n then -- room for every due entry: slot by slot
    for _, seq in ipairs(slots) do
      go(seq)
      done = done + upkeep(names(seq)[field], n - done, one)
    end
    return done
  end
  for _ = 1, 4 do -- a round more only after dropped entries (a task gone): they are rare
    local all = {}
    for _, seq in ipairs(slots) do
      local got = redis.call('ZRANGEBYSCORE', names(seq)[field], '-inf', NOWS, 'WITHSCORES', 'LIMIT', 0, n - done)
      for j = 1, #got, 2 do all[#all + 1] = {tonumber(got[j + 1]), got[j], seq} end
    end
    if #all == 0 then break end
    table.sort(all, earlier)
    local picked, moved = math.min(#all, n - done), 0
    for _, seq in ipairs(slots) do
      for j = 1, picked do
        if all[j][3] == seq then
          go(seq)
          moved = moved + one(all[j][2])
        end
      end
    end
    done = done + moved
    if moved == picked or done >= n then break end -- else dropped entries leave room for the next
  end
  return done
end

-- the `seq` keys of the slots of a call over several: KEYS[1]'s, then A(from..)'s
local function call_slots(from)
  local slots, i = {KEYS[1]}, from
  while A(i) do
    slots[#slots + 1] = A(i)
    i = i + 1
  end
  return slots
end

-- the entries A(from..) (members of this slot's), each by `one`: the upkeep a broker on a cluster
-- chose over every slot (broker.py); how many moved
local function each_member(from, one)
  local done, i = 0, from
  while A(i) do
    done = done + one(A(i))
    i = i + 1
  end
  return done
end
