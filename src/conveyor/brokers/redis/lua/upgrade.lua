-- upgrade.lua: move up to `limit` tasks of layout 4 into layout 5's queue slots, each whole or not at
-- all (upgrade.py; docs/architecture.md, "From layout 4"). One server only: the call touches layout 4's
-- slot and layout 5's, which a cluster refuses in one call.
-- KEYS: layout 4's slot (its `seq`, "{ns}:v4:seq", _call.lua): every key of layout 4 is in it.
-- ARGV: head (_call.lua), then A(1) the HSCAN cursor over layout 4's rows ("0" to begin), A(2) limit,
--       A(3) the namespace.
-- Returns: "<cursor> <moved> <left>": the cursor to go on from, the tasks moved (not counting those
--          dropped as duplicates, which count towards `limit`), and the rows layout 4
--          still holds (0: layout 4's remaining keys are gone too: its queues' settings and task
--          declarations carried over, the rest deleted, its registry last).
-- Transition: none. A task keeps its state, member (so its order), scores, row and side data; its
-- unique key's entry and an entry in layout 5's `ids` (every layout 4 id lacks "~<label>") name it
-- in the namespace slot. A pending task that waited in its enqueue call's group waits on its own.
-- A task whose id layout 5 already holds is a second task of that id, which the version before's
-- enqueue stored because it cannot see layout 5 (a producer of that version enqueueing a custom id
-- again after its task moved): the duplicate this version refuses, dropped (the id stays layout 5's
-- task's). A task whose id's entry names another slot that holds no such row stays.

local SETTING_FIELDS = {'ms', 'cc', 'ag', 'pa'}

local function label_of(q)
  if #q <= 16 then return q end
  return string.sub(redis.sha1hex(q), 1, 10)
end

-- each call:
local cursor, limit, ns = A(1), tonumber(A(2)), A(3)
local old_seq, old = KEYS[1], P
local np = '{' .. ns .. '}:v5:'
local queues5, uniq5, ids5 = np .. 'queues', np .. 'uniq', np .. 'ids'
local seq4 = tonumber(redis.call('GET', old_seq) or '0')
local ready = {} -- queue -> true once its settings, registration and slot counter are carried over

-- a queue's settings and registration carried over, and its slot's enqueue counter raised to layout
-- 4's, so that tasks enqueued after the move sort after the moved ones of equal score
local function carry_queue(q)
  if ready[q] then return end
  ready[q] = true
  local values = redis.call('HMGET', old .. 'qs:' .. q, unpack(SETTING_FIELDS))
  for i, name in ipairs(SETTING_FIELDS) do
    if values[i] then redis.call('HSETNX', skey(q), name, values[i]) end
  end
  redis.call('SADD', queues5, q)
  if tonumber(redis.call('GET', SEQ) or '0') < seq4 then redis.call('SET', SEQ, seq4) end
end

-- a task of layout 4 whose id layout 5 holds (see the header): out of layout 4, data and unique key
local function drop_duplicate(t)
  unindex(t)
  drop_data(t.id)
  if t.uk and entry_names(redis.call('HGET', old .. 'uniq', t.uk), t.id) then
    redis.call('HDEL', old .. 'uniq', t.uk)
  end
end

local scan = redis.call('HSCAN', ROWS, cursor, 'COUNT', limit)
local found, moved, done = scan[2], 0, 0
for j = 1, #found, 2 do
  if done >= limit then break end
  local id = found[j]
  local t = parse(id, found[j + 1])
  local label = t and label_of(t.q)
  local dest = t and '{' .. ns .. '|' .. label .. '}:v5:'
  local entry = t and redis.call('HGET', ids5, id)
  local holder = entry and string.match(entry, '^[^ ]*')
  if holder and redis.call('HEXISTS', '{' .. ns .. '|' .. holder .. '}:v5:rows', id) == 1 then
    drop_duplicate(t)
    done = done + 1
  elseif t and (entry == false or holder == label) and redis.call('HEXISTS', dest .. 'rows', id) == 0 then
    local result, lasterr = redis.call('HGET', RESULTS, id), redis.call('HGET', LASTERR, id)
    local limits, traceback = redis.call('HGET', LIMITS, id), redis.call('HGET', TRACEBACKS, id)
    local failures = redis.call('LRANGE', ekey(id), 0, -1)
    local holds = t.uk and redis.call('HGET', old .. 'uniq', t.uk) == id
    unindex(t)
    drop_data(id)
    if holds then redis.call('HDEL', old .. 'uniq', t.uk) end
    switch(dest .. 'seq')
    carry_queue(t.q)
    save(t)
    if result then redis.call('HSET', RESULTS, id, result) end
    if lasterr then redis.call('HSET', LASTERR, id, lasterr) end
    if limits then redis.call('HSET', LIMITS, id, limits) end
    if traceback then redis.call('HSET', TRACEBACKS, id, traceback) end
    if #failures > 0 then redis.call('RPUSH', ekey(id), unpack(failures)) end
    index(t)
    if holds then redis.call('HSETNX', uniq5, t.uk, id .. ' ' .. NOWS) end
    redis.call('HSETNX', ids5, id, label .. ' ' .. NOWS)
    switch(old_seq)
    moved, done = moved + 1, done + 1
  end
end
local left = redis.call('HLEN', ROWS)
if left == 0 then -- the rest of layout 4: queues without tasks, declarations; then its keys deleted
  for _, q in ipairs(redis.call('SMEMBERS', old .. 'queues')) do
    switch('{' .. ns .. '|' .. label_of(q) .. '}:v5:seq')
    carry_queue(q)
    switch(old_seq)
    redis.call('DEL', old .. 'qs:' .. q)
  end
  local declared = redis.call('HGETALL', old .. 'declared')
  for i = 1, #declared, 2 do redis.call('HSETNX', np .. 'declared', declared[i], declared[i + 1]) end
  redis.call('DEL', old .. 'declared', old .. 'uniq', old .. 'wake', old .. 'listening', DUE, LEASES, EXPIRING)
  redis.call('DEL', old_seq, old .. 'queues')
end
return finish(scan[1] .. ' ' .. moved .. ' ' .. left)
