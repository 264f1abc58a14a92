-- _resend.lua: a call sent again (scripts.TOKENED): repeated() tells a first send from a repeat by the
-- call's token and answers a repeat as the first send did; the other helpers keep, read or drop that
-- answer. finish() (_call.lua) writes an answer other than the usual "".

-- A call sent again. The broker sends a call once more when its connection broke before the reply
-- was read (redis-py's retry in connections.py; cluster.py), so its first send may have run: it would
-- meet its own tasks as duplicates, or store again a task that ran and was deleted meanwhile. A call
-- of scripts.TOKENED carries a random token, the same in every send of it. An enqueue, a take, a
-- withdraw or an operator's action starts with repeated(): one SET NX of SENTP .. token, kept for
-- the resend window (policy(4), ms), which tells a first send (the key was absent) from a repeat (it
-- was there). A first send's answer is kept in that key: "\0" (the SET's own value) stands for ""
-- without events, the usual answer, so only another answer costs a second write (finish()); a
-- refusal (an error reply, nothing written) deletes the key, so a repeat decides afresh
-- (forget_sent()). A repeat writes nothing and answers as the first send did, its events included.
-- A settle tells a repeat by the rows its first send wrote (settle.lua), and keeps its answer only
-- where they may not show it: it reads the key (sent_answer()) only when an outcome finds no sign of
-- it. A claim's token is its lease token base, and it keeps its own kind of answer (claim.lua).
-- A refusal that wrote something (take_enqueue.lua's) is kept too, "\1" and its text, and a repeat
-- refuses with it again (refuse_kept()). A call joining two operations asks once, for both: the
-- second repeated() of a call answers nil.
local function answer_again(result, blob)
  if blob ~= '' and WANT then return {result, NOWS, blob} end
  return NOWS .. '\n' .. result
end
local function kept_answer(kept)
  local cut = string.find(kept, '\0', 1, true)
  return answer_again(string.sub(kept, 1, cut - 1), string.sub(kept, cut + 1))
end
local function repeated()
  if CHECKED then return nil end
  CHECKED = true
  local kept = redis.call('SET', SENTP .. TOKEN, '\0', 'PX', policy(4), 'NX', 'GET')
  if not kept then return nil end
  if string.byte(kept) == 1 then return redis.error_reply(string.sub(kept, 2)) end
  return kept_answer(kept)
end
local function refuse_kept(refusal)
  redis.call('SET', SENTP .. TOKEN, '\1' .. refusal, 'PX', policy(4))
  return redis.error_reply(refusal)
end
local function sent_answer()
  local kept = redis.call('GET', SENTP .. TOKEN)
  if not kept then return nil end
  return kept_answer(kept)
end
local function forget_sent(refusal)
  redis.call('DEL', SENTP .. TOKEN)
  return refusal
end
