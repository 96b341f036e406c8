-- The fleet-wide cap (optional): each replica leases a block of the fleet's concurrency and
-- renews it while it serves; the blocks recorded here never add up to more than the cap.
--
-- KEYS[1] leases  ZSET replica id -> when its record ends (ms, Redis time)
-- KEYS[2] blocks  HASH replica id -> slots recorded for it
-- KEYS[3] wants   HASH replica id -> slots it asks for (its own cap)
-- ARGV: replica id, want, held (slots it holds now), fleet cap, hold ms (how long the record
--       outlives this call: the replica's lease, plus the request deadline and its grace, so
--       that every request admitted under the lease has ended before the record does),
--       release (1: the replica stops; its block returns now)
--
-- Returns {slots granted for new admissions, live replicas}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local want = tonumber(ARGV[2])
local held = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local hold_ms = tonumber(ARGV[5])

-- A replica that stopped renewing (killed, cut off) gets its block back here.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], gone)
  redis.call('HDEL', KEYS[3], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)

if ARGV[6] == '1' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  return {0, redis.call('ZCARD', KEYS[1])}
end

local previous = tonumber(redis.call('HGET', KEYS[2], id)) or 0
redis.call('HSET', KEYS[3], id, want)
redis.call('ZADD', KEYS[1], now + hold_ms, id)

-- The fair share: the cap water-filled over the wants of the live replicas, so a replica
-- that asks less leaves its rest to the others.
local wants = {}
local others = 0
local mine_index = 0
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, rid in ipairs(ids) do
  local w = tonumber(redis.call('HGET', KEYS[3], rid)) or 0
  table.insert(wants, {w, rid})
  if rid ~= id then
    others = others + (tonumber(redis.call('HGET', KEYS[2], rid)) or 0)
  end
end
table.sort(wants, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
local left = cap
local share = 0
for i, entry in ipairs(wants) do
  local part = math.min(entry[1], math.floor(left / (#wants - i + 1)))
  left = left - part
  if entry[2] == id then
    share = part
  end
end

-- Never more than what the others leave free. A block that shrinks stays recorded at what
-- the replica still holds (at most its previous block) until those requests end.
local grant = math.max(0, math.min(share, cap - others))
local recorded = math.max(grant, math.min(held, previous))
redis.call('HSET', KEYS[2], id, recorded)
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, hold_ms + 1000)
end
return {grant, #ids}
