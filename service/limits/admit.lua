-- Admission: check and take, atomically, the shared limits of one request (docs/limits.md):
-- the account's concurrency, the approval's rate and the account's daily budget. The global
-- cap is each replica's own (service/limits/replica_slots.py) and never reaches Redis.
--
-- Every key is the account's: one hash tag per account, so a Redis Cluster spreads the
-- admissions of many accounts over its masters.
-- KEYS[1] account leases     ZSET request id -> lease expiry (ms, Redis time)
-- KEYS[2] approval bucket    HASH tokens, ts (ms): 'per_minute' tokens a minute, refilled continuously
-- KEYS[3] account daily      HASH day (days since the epoch, UTC), used
-- KEYS[4] cancelled ids      ZSET request id -> expiry: compensating releases that came first
-- ARGV: request id, account cap, per minute, lease ms, daily cap (0 = off)
--
-- Returns integers only (cheap to read): {admitted (1) | refused (0) | cancelled (-1),
--          limit (0 none, 2 account, 3 approval, 4 account_daily), retry ms,
--          milli-tokens left, daily used, ms until the daily reset}.
-- Every time is Redis TIME: a replica's own clock never enters a decision.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rid = ARGV[1]
local account_cap = tonumber(ARGV[2])
local per_minute = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local daily_cap = tonumber(ARGV[5])
local day_ms = 86400000

-- Expired leases belong to requests whose replica died: they free themselves here.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- (The cancelled set is purged by the compensating releases that add to it: release.lua.)

local day = math.floor(now / day_ms)
local reset_ms = (day + 1) * day_ms - now

-- A compensating release for this id already ran: its client gave up, take nothing.
if redis.call('ZSCORE', KEYS[4], rid) then
  return {-1, 0, 0, 0, 0, reset_ms}
end

local rate = per_minute / 60000
local bucket = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
local tokens = tonumber(bucket[1])
local ts = tonumber(bucket[2])
if tokens == nil or ts == nil then
  tokens = per_minute
  ts = now
elseif now > ts then
  tokens = math.min(per_minute, tokens + (now - ts) * rate)
  ts = now
end
-- (now < ts only after a failover to a server with a slower clock: no refill until it catches up)

local used = 0
if daily_cap > 0 then
  local daily = redis.call('HMGET', KEYS[3], 'day', 'used')
  if tonumber(daily[1]) == day then
    used = tonumber(daily[2]) or 0
  end
end

local function refuse(limit, retry_ms)
  return {0, limit, retry_ms, math.floor(tokens * 1000), used, reset_ms}
end

-- The refusal named is the one that binds longest: daily, then rate, then concurrency.
if daily_cap > 0 and used >= daily_cap then
  return refuse(4, reset_ms)  -- account_daily
end
if tokens < 1 then
  return refuse(3, math.ceil((1 - tokens) / rate))  -- approval
end
if redis.call('ZCARD', KEYS[1]) >= account_cap then
  return refuse(2, 0)  -- account
end

local expiry = now + lease_ms
redis.call('ZADD', KEYS[1], expiry, rid)
redis.call('PEXPIRE', KEYS[1], lease_ms + 1000)

tokens = tokens - 1
redis.call('HSET', KEYS[2], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- An untouched bucket is full again after this long; then the key is not needed.
redis.call('PEXPIRE', KEYS[2], math.ceil((per_minute - tokens) / rate) + 1000)

if daily_cap > 0 then
  used = used + 1
  redis.call('HSET', KEYS[3], 'day', tostring(day), 'used', tostring(used))
  redis.call('PEXPIRE', KEYS[3], reset_ms + 60000)
end

return {1, 0, 0, math.floor(tokens * 1000), used, reset_ms}
