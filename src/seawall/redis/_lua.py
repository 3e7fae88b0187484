"""The Lua scripts that update fleet state atomically on the Redis server.

Every script reads the time from ``TIME`` (Redis's clock, the same for every client) unless the
caller passes one (a virtual clock in tests). Every script touches only the keys of one shared
object, which share one hash tag, so the scripts run on Redis Cluster too.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BREAKER", "BUDGET", "QUOTA", "THROTTLE", "TOKENS"]

# The time: ARGV[1], or Redis's own clock when ARGV[1] is empty.
_NOW: Final = """
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
"""

# Once only: a call whose answer was lost (a timeout while Redis was slow) is sent again,
# unchanged, and must not count twice. KEYS[#KEYS] is the calling fleet's record of its calls
# on this object (a hash: call id -> what it was granted), ARGV[#ARGV] the call's id (an
# object's calls are numbered 1, 2, 3, ... in each fleet). `again` holds what the call was
# granted when it ran before (nil: it never ran); `remember` records a call that runs now and
# forgets the one 64 calls before it: a fleet has few calls in flight at once, so its last 64
# are enough to recognise the ones sent again. The record lives a day after the fleet's last
# call on the object.
_ONCE: Final = """
local once_key, once_id = KEYS[#KEYS], ARGV[#ARGV]
local again = redis.call('HGET', once_key, once_id)
if again then again = tonumber(again) end
local function remember(granted)
  redis.call('HSET', once_key, once_id, granted)
  redis.call('HDEL', once_key, tostring(tonumber(once_id) - 64))
  redis.call('PEXPIRE', once_key, 86400000)
end
"""

# A sliding window in slices (as the local RetryBudget): a hash whose fields are a one-letter
# counter name followed by the slice index; fields older than the window are dropped. Fields
# starting with '_' are the window's own records (its lineage, who restored it).
_SLICES: Final = """
local function window(key, index, slices, a, b)
  local oldest = index - slices + 1
  local all = redis.call('HGETALL', key)
  local sa, sb = 0, 0
  for i = 1, #all, 2 do
    local field = all[i]
    local kind = string.sub(field, 1, 1)
    if kind ~= '_' then
      local at = tonumber(string.sub(field, 2))
      if at == nil or at < oldest then
        redis.call('HDEL', key, field)
      elseif kind == a then
        sa = sa + (tonumber(all[i + 1]) or 0)
      elseif kind == b then
        sb = sb + (tonumber(all[i + 1]) or 0)
      end
    end
  end
  return sa, sb, oldest
end
"""

#: RetryBudget. KEYS: the window hash. ARGV: now, slice seconds, slices, ratio, reserve,
#: deposits to add, retries to add (spent while degraded), slice index of a returned lease,
#: tokens returned, tokens wanted (a lease), tokens needed now (0: a standing lease only), then
#: the window's lineage the client knows, a lineage for a window created now, the client's id,
#: the client's own part of the window ("index:deposits:retries,..."), its last view of the
#: window (slice index, retries), and the slice index of its previous answer (where its deposits
#: go; -1: the current one). When the client knew another lineage (Redis restarted empty,
#: FLUSHALL), its part is put back, once per lineage: every live client puts back exactly what
#: it had added, and until all have, the largest view's retries count, so that the loss grants
#: no fresh floor.
#: Then the fleet's record of its calls (KEYS) and the call's id (ARGV), as in ``_ONCE``.
#: Returns {granted, slice index, deposits in the window, retries in the window, seconds until
#: the window's slices alone free a retry (0 when one is free now), lineage}.
BUDGET: Final = (
    _NOW
    + _SLICES
    + _ONCE
    + """
local slice, slices = tonumber(ARGV[2]), tonumber(ARGV[3])
local ratio, reserve = tonumber(ARGV[4]), tonumber(ARGV[5])
local index = math.floor(now / slice)
local key = KEYS[1]
local lineage = redis.call('HGET', key, '_lineage')
if not lineage then
  lineage = ARGV[13]
  redis.call('HSET', key, '_lineage', lineage)
end
-- Is this client's part of the window in this lineage?
local mark = '_c' .. ARGV[14]
local present = ARGV[12] == lineage or redis.call('HEXISTS', key, mark) == 1
if not present and ARGV[12] ~= '' and not again then
  -- The client knew an earlier lineage: put its own part back (exactly, slice by slice),
  -- and keep the largest of the retries the clients saw in the lost window: what the
  -- clients that cannot reach Redis now had added is in there, and counts until they put
  -- their own part back or it leaves the window.
  local put = 0
  for at, dd, rr in string.gmatch(ARGV[15], '(%-?%d+):(%d+):(%-?%d+)') do
    at, dd, rr = tonumber(at), tonumber(dd), tonumber(rr)
    if at > index - slices and at <= index then
      if dd > 0 then redis.call('HINCRBY', key, 'd' .. at, dd) end
      if rr ~= 0 then redis.call('HINCRBY', key, 'r' .. at, rr) end
      put = put + rr
    end
  end
  local seen_at, seen_r = tonumber(ARGV[16]), tonumber(ARGV[17])
  local v = redis.call('HMGET', key, '_seen', '_seen_at', '_put')
  local best, best_at = tonumber(v[1] or '0'), tonumber(v[2] or '-1')
  if seen_at > index - slices and seen_at <= index and seen_r > best then
    best, best_at = seen_r, seen_at
  end
  redis.call('HSET', key, mark, 1, '_seen', best, '_seen_at', best_at,
    '_put', tonumber(v[3] or '0') + put)
  present = true
end
local deposits, spent = tonumber(ARGV[6]), tonumber(ARGV[7])
if again then deposits, spent = 0, 0 end
-- Deposits go to the slice of the client's previous answer: never later than they were made
-- (so they never stay in the window longer than they should), within the window.
local made = tonumber(ARGV[18]) or -1
if made < 0 or made > index then made = index end
if made < index - slices + 1 then made = index - slices + 1 end
if deposits > 0 then redis.call('HINCRBY', key, 'd' .. made, deposits) end
if spent > 0 then redis.call('HINCRBY', key, 'r' .. index, spent) end
local d, r, oldest = window(key, index, slices, 'd', 'r')
-- Retries of a lost window that no client has put back yet (see above).
local missing, missing_at = 0, -1
local v = redis.call('HMGET', key, '_seen', '_seen_at', '_put')
if v[1] then
  missing_at = tonumber(v[2])
  if missing_at >= oldest then
    missing = math.max(0, tonumber(v[1]) - tonumber(v[3] or '0'))
  else
    redis.call('HDEL', key, '_seen', '_seen_at', '_put')
  end
end
local back, at = tonumber(ARGV[9]), tonumber(ARGV[8])
if again then back = 0 end
-- A lease is given back only to the window it was counted in (present: this lineage).
if back > 0 and present and at >= oldest and at <= index then
  back = math.min(back, r)  -- never below zero, whatever a client says
  if back > 0 then
    redis.call('HINCRBY', key, 'r' .. at, -back)
    r = r - back
  end
end
if r < 0 then r = 0 end
r = r + missing
local room = math.floor(d * ratio + reserve - r + 1e-9)
local want, need = tonumber(ARGV[10]), tonumber(ARGV[11])
local grant = 0
if again then
  grant = again  -- counted when the call ran
else
  if room >= need and room > 0 then
    -- Take at most half of what is left, so that one client cannot hold the whole fleet's
    -- room.
    grant = math.max(need, math.min(want, math.floor(room / 2)))
    if grant > room then grant = room end
  end
  if grant > 0 then
    redis.call('HINCRBY', key, 'r' .. index, grant)
    r = r + grant
  end
  remember(grant)
end
redis.call('PEXPIRE', key, math.ceil(slice * slices * 2000))
-- No room left: when will the slices leaving the window free one retry, if nothing else
-- changes? (A client refuses retries until then without asking, unless deposits come.)
local wait = 0
local left = d * ratio + reserve - r
if left < 1 - 1e-9 then
  wait = slice * slices
  local per = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local at = tonumber(string.sub(all[i], 2))
    if at ~= nil and string.sub(all[i], 1, 1) ~= '_' then
      local v = tonumber(all[i + 1]) or 0
      local p = per[at] or 0
      if string.sub(all[i], 1, 1) == 'r' then p = p + v else p = p - ratio * v end
      per[at] = p
    end
  end
  if missing > 0 then per[missing_at] = (per[missing_at] or 0) + missing end
  for j = 0, slices - 1 do
    left = left + (per[oldest + j] or 0)
    if left >= 1 - 1e-9 then
      wait = (index + 1 + j) * slice - now
      break
    end
  end
end
return {grant, index, d, r, tostring(wait), lineage}
"""
)

#: TokenBucket, in thousandths of a token. KEYS: the bucket. ARGV: now (unused), max, ratio,
#: failures, successes; then the record and the call's id (``_ONCE``). Returns the tokens
#: (thousandths) after the update.
TOKENS: Final = (
    _ONCE
    + """
local max, ratio = tonumber(ARGV[2]), tonumber(ARGV[3])
local failures, successes = tonumber(ARGV[4]), tonumber(ARGV[5])
if again then failures, successes = 0, 0 else remember(0) end
local milli = tonumber(redis.call('GET', KEYS[1]) or max)
milli = math.max(0, milli - 1000 * failures)
milli = math.min(max, milli + ratio * successes)
redis.call('SET', KEYS[1], milli, 'EX', 86400)
return milli
"""
)

#: RetryQuota. KEYS: the quota. ARGV: now (unused), capacity, tokens given back (refunds,
#: rewards, an unused lease; less what was spent while degraded), tokens wanted (a lease),
#: tokens needed now (0: a standing lease); then the record and the call's id (``_ONCE``).
#: Returns {granted, available after}.
QUOTA: Final = (
    _ONCE
    + """
local capacity = tonumber(ARGV[2])
local credit, want, need = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local available = tonumber(redis.call('GET', KEYS[1]) or capacity)
local grant = 0
if again then
  grant = again  -- taken when the call ran
else
  -- A negative credit: what a client spent while it could not reach Redis.
  available = math.max(0, math.min(capacity, available + credit))
  if available >= need and available > 0 then
    grant = math.max(need, math.min(want, available))
  end
  available = available - grant
  remember(grant)
end
redis.call('SET', KEYS[1], available, 'EX', 86400)
return {grant, available}
"""
)

#: AdaptiveThrottle. KEYS: the window hash. ARGV: now, slice seconds, slices, requests to add,
#: accepts to add; then the record and the call's id (``_ONCE``). Returns {requests in the
#: window, accepts in the window}.
THROTTLE: Final = (
    _NOW
    + _SLICES
    + _ONCE
    + """
local slice, slices = tonumber(ARGV[2]), tonumber(ARGV[3])
local index = math.floor(now / slice)
local key = KEYS[1]
local requests, accepts = tonumber(ARGV[4]), tonumber(ARGV[5])
if again then requests, accepts = 0, 0 else remember(0) end
if requests > 0 then redis.call('HINCRBY', key, 'q' .. index, requests) end
if accepts > 0 then redis.call('HINCRBY', key, 'a' .. index, accepts) end
local q, a = window(key, index, slices, 'q', 'a')
redis.call('PEXPIRE', key, math.ceil(slice * slices * 2000))
return {q, a}
"""
)

#: CircuitBreaker. KEYS: the state hash, the window (a string of outcome codes for a count
#: window, a hash of slices for a time window). ARGV: now, operation, then the state the client
#: knows (its lineage and generation), a lineage for a state created now, the keys' time to live
#: (ms), probes allowed, probe timeout (s), open seconds (jitter applied), then per operation:
#:   sync:    outcomes ('0'..'3': bit 1 failed, bit 2 slow), window kind ('count'|'time'),
#:            window size (calls, or slices), slice seconds, minimum calls, failure ratio,
#:            slow ratio (-1: off)
#:   acquire: nothing more
#:   done:    'ok' | 'fail' | 'release'
#:   set:     'closed' | 'isolated'
#: Returns {state, generation, seconds left open, granted (1/0), calls, failures, slow, lineage}.
#:
#: The lineage is a random name given to the state when it is created (the first time, or after
#: the key expired or Redis lost it): generations count up within one lineage, so a client can
#: tell an answer older than what it knows from a state that started again.
BREAKER: Final = (
    _NOW
    + """
local skey, wkey = KEYS[1], KEYS[2]
local op, lineage, known = ARGV[2], ARGV[3], tonumber(ARGV[4])
local ttl, probes, probe_timeout = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local seconds = tonumber(ARGV[9])
local h = redis.call('HMGET', skey, 'state', 'gen', 'until', 'flight', 'ok', 'since', 'lineage')
local state = h[1] or 'closed'
local gen = tonumber(h[2] or '0')
local open_until = tonumber(h[3] or '0')
local flight, oks = tonumber(h[4] or '0'), tonumber(h[5] or '0')
local since = tonumber(h[6] or '0')
local own = h[7] or ARGV[5]
local same = lineage == own and known == gen
local granted = 0
local calls, failures, slow = 0, 0, 0

local function change(new, open_seconds)
  state = new
  gen = gen + 1
  flight, oks = 0, 0
  since = now
  if new == 'open' then open_until = now + open_seconds end
  if new == 'closed' or new == 'open' then redis.call('DEL', wkey) end
end

-- Probes that have not all answered within probe_timeout of the half-open period's start
-- count as failed (as the local breaker): open again, on this clock, whoever asks.
local function expire()
  if state == 'half_open' and flight + oks >= probes and now - since >= probe_timeout then
    change('open', seconds)
  end
end

local function totals_count()
  local s = redis.call('GET', wkey) or ''
  local _, f1 = string.gsub(s, '1', '')
  local _, s2 = string.gsub(s, '2', '')
  local _, b3 = string.gsub(s, '3', '')
  return #s, f1 + b3, s2 + b3
end

local function totals_time(index, slices)
  local oldest = index - slices + 1
  local all = redis.call('HGETALL', wkey)
  local c, f, sl = 0, 0, 0
  for i = 1, #all, 2 do
    local field = all[i]
    local at = tonumber(string.sub(field, 2))
    if at == nil or at < oldest then
      redis.call('HDEL', wkey, field)
    else
      local kind, v = string.sub(field, 1, 1), tonumber(all[i + 1])
      if kind == 'c' then c = c + v elseif kind == 'f' then f = f + v else sl = sl + v end
    end
  end
  return c, f, sl
end

if op == 'sync' then
  expire()
  local outcomes, kind, size = ARGV[10], ARGV[11], tonumber(ARGV[12])
  local slice, minimum = tonumber(ARGV[13]), tonumber(ARGV[14])
  local fratio, sratio = tonumber(ARGV[15]), tonumber(ARGV[16])
  -- Outcomes count in the closed state they were made in; a state still in its first closed
  -- period (new, or started again after Redis lost it) takes any closed-state outcomes.
  local fresh = (same or gen == 0) and state == 'closed' and #outcomes > 0
  if kind == 'count' then
    if fresh then
      local s = (redis.call('GET', wkey) or '') .. outcomes
      if #s > size then s = string.sub(s, -size) end
      redis.call('SET', wkey, s, 'PX', ttl)
    end
    calls, failures, slow = totals_count()
  else
    local index = math.floor(now / slice)
    if fresh then
      local _, f1 = string.gsub(outcomes, '1', '')
      local _, s2 = string.gsub(outcomes, '2', '')
      local _, b3 = string.gsub(outcomes, '3', '')
      redis.call('HINCRBY', wkey, 'c' .. index, #outcomes)
      redis.call('HINCRBY', wkey, 'f' .. index, f1 + b3)
      redis.call('HINCRBY', wkey, 's' .. index, s2 + b3)
      redis.call('PEXPIRE', wkey, math.ceil(slice * size * 2000))
    end
    calls, failures, slow = totals_time(index, size)
  end
  if fresh and string.find(outcomes, '[123]') and calls >= minimum then
    if failures / calls >= fratio or (sratio >= 0 and slow / calls >= sratio) then
      change('open', seconds)
    end
  end
elseif op == 'acquire' then
  if state == 'open' and now >= open_until then change('half_open', 0) end
  expire()
  if state == 'half_open' and flight + oks < probes then
    flight = flight + 1
    granted = 1
  end
elseif op == 'done' then
  -- Only the probe's own half-open period hears its result: a late one is ignored.
  local outcome = ARGV[10]
  if same and state == 'half_open' then
    if outcome == 'release' then
      if flight > 0 then flight = flight - 1 end
    elseif outcome == 'fail' then
      change('open', seconds)
    else
      if flight > 0 then flight = flight - 1 end
      oks = oks + 1
      if oks >= probes then change('closed', 0) end
    end
  end
elseif op == 'set' then
  change(ARGV[10], 0)
end
redis.call('HSET', skey, 'state', state, 'gen', gen, 'until', tostring(open_until),
  'flight', flight, 'ok', oks, 'since', tostring(since), 'lineage', own)
if state == 'isolated' then
  redis.call('PERSIST', skey)  -- held by a person until reset, however long nobody calls
else
  redis.call('PEXPIRE', skey, ttl)
end
local left = 0
if state == 'open' then left = math.max(0, open_until - now) end
return {state, gen, tostring(left), granted, calls, failures, slow, own}
"""
)
