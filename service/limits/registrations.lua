-- Registration limit: one token bucket per client address (registration_limit.py).
--
-- KEYS[1] bucket   HASH tokens, ts (ms, Redis time)
-- ARGV: burst (the bucket's size), per hour (its refill)
--
-- Returns {taken (1) | refused (0), ms until the next token (0 when taken)}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2]) / 3600000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(bucket[1])
local ts = tonumber(bucket[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
elseif now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
if tokens < 1 then
  return {0, math.ceil((1 - tokens) / rate)}
end
tokens = tokens - 1
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- An untouched bucket is full again after this long; then the key is not needed.
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate) + 1000)
return {1, 0}
