-- Release: free one request's concurrency leases, by request id. Idempotent.
--
-- KEYS: the account's leases (a plain release: nothing else is read), then, for a
--       compensating release, the other three keys of admit.lua (all in the account's slot).
-- ARGV: request id; for a compensating release also 1, lease ms, per minute, daily cap
--
-- A compensating release is sent when the admission's answer never reached the replica
-- (timeout, cancellation): the admission may have run, may run later, or never. It leaves a
-- tombstone so a late admission takes nothing, and if the admission did run it also gives
-- back the token and the daily unit the request never used.
-- Returns 1 when a lease was freed, else 0.

local rid = ARGV[1]
local freed = redis.call('ZREM', KEYS[1], rid)
if ARGV[2] ~= '1' then
  return freed
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms = tonumber(ARGV[3])
local per_minute = tonumber(ARGV[4])
local daily_cap = tonumber(ARGV[5])

-- Expired tombstones are purged here, where the set grows (admit.lua only reads it).
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZADD', KEYS[4], now + lease_ms, rid)
redis.call('PEXPIRE', KEYS[4], lease_ms + 1000)
if freed == 0 then
  return 0
end

local bucket = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
local tokens = tonumber(bucket[1])
local ts = tonumber(bucket[2])
if tokens ~= nil and ts ~= nil then
  if now > ts then
    tokens = tokens + (now - ts) * per_minute / 60000
    ts = now
  end
  tokens = math.min(per_minute, tokens + 1)
  redis.call('HSET', KEYS[2], 'tokens', tostring(tokens), 'ts', tostring(ts))
end

if daily_cap > 0 then
  local day = math.floor(now / 86400000)
  local daily = redis.call('HMGET', KEYS[3], 'day', 'used')
  if tonumber(daily[1]) == day and (tonumber(daily[2]) or 0) > 0 then
    redis.call('HINCRBY', KEYS[3], 'used', -1)
  end
end
return 1
