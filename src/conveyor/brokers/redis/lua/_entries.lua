-- _entries.lua: the namespace slot's entries (unique key -> holder in UNIQ, custom id -> label in IDS):
-- the rule by which a task takes one (entry_answer(), take.lua, take_enqueue.lua; the broker: claims.py).

-- whether an entry of UNIQ names task `id`: "<id>" (written by enqueue.lua) or "<id> <since>" (take.lua)
local function entry_names(entry, id)
  return entry == id or (entry and string.sub(entry, 1, #id + 1) == id .. ' ')
end

-- The server's TIME as text, "<seconds>.<6 digits>": an entry's `since` (below), so its age does not
-- depend on the callers' clocks (made without tonumber() and string.format(), dear in a hot call).
local function server_time()
  local t = redis.call('TIME')
  local us = t[2]
  if #us < 6 then us = string.sub('00000' .. us, -6) end
  return t[1] .. '.' .. us
end

-- The rule of the namespace slot's entries (take.lua, take_enqueue.lua; the broker: claims.py), for
-- the entry `field` of `index` (kind "u": `uniq`, unique key -> "<id> <since>"; "i": `ids`, custom id
-- -> "<label> <since>"), read as `entry` (false: absent), that a task claims to name `value`, taking
-- it over from `expected` ("" none): its answer, "" (free, or naming `expected`), "=" (naming `value`
-- already) or "<what it names> <1 if older than `bound` seconds at `now`, else 0>", and whether the
-- entry is to be written (value .. " " .. now), which the caller does. `v4`: layout 4's prefix while it
-- holds data (upgrade.py), else "": a free entry that layout 4 still holds, for a task it has, is
-- answered as held, and young, by its holder (a custom id: by ":v4", a label no queue has), unless
-- that is `expected`. `bound` and `now` are text, read only for an entry held by another.
local function entry_answer(kind, entry, field, value, expected, v4, bound, now)
  local holder, at = nil, nil
  if entry then holder, at = string.match(entry, '^(%S+) ?(%S*)$') end
  if not entry and v4 ~= '' then -- layout 4's own entry, for a task it still has
    local held = kind == 'i' and field or redis.call('HGET', v4 .. 'uniq', field)
    if held and redis.call('HEXISTS', v4 .. 'rows', held) == 1 then
      holder = kind == 'i' and ':v4' or held
      if holder ~= expected then entry, at = true, nil end -- held since now: young
    end
  end
  if not entry or holder == expected or holder == value then
    return (holder == value and holder ~= expected) and '=' or '', true
  end
  local old = at == '' or (at ~= nil and tonumber(at) + tonumber(bound) < tonumber(now))
  return holder .. (old and ' 1' or ' 0'), false
end

-- take.lua's step over the quadruples (kind, field, value, expected) q[from] .. q[last] (q: ARGV, or
-- a list take_enqueue.lua built), `bound` and `v4` as entry_answer() takes them, each entry judged
-- and written in turn; its answers joined by newlines
local function take_entries(q, from, last, bound, v4)
  local now = server_time()
  local since, out = ' ' .. now, {}
  for i = from, last, 4 do
    local kind, field, value = q[i], q[i + 1], q[i + 2]
    local index = kind == 'i' and IDS or UNIQ
    local answer, free = entry_answer(kind, redis.call('HGET', index, field), field, value, q[i + 3], v4, bound, now)
    if free then redis.call('HSET', index, field, value .. since) end
    out[#out + 1] = answer
  end
  return table.concat(out, '\n')
end
