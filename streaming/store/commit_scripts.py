"""The Lua scripts of a batch's commit and of a namespace's upkeep, apart from the I/O that runs them
(:mod:`streaming.store.commit`): each one step on one node, so that what it counts stays exact.
"""

from __future__ import annotations

from streaming.rules.tradeoff import RETIRED_SERVERS

TRIM_LUA = """
local n = redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[1], 'LIMIT', 0)
if n > 0 then redis.call('INCRBY', KEYS[2], n) end
return n
"""
"""Trim the input and count what went, in one step: ``{ns}:trimmed`` plus the entries left minus those
committed is exactly how many wait, without walking the stream (Redis 6 has no ``entries-added``).
``LIMIT 0``: an approximate trim otherwise frees at most 100 x ``stream-node-max-entries`` (10,000) entries a
call, and at two trims a second the stream outgrew its bound above about 20,000 events/s."""


FORGET_SERVERS_LUA = """
local n = tonumber(ARGV[1])
local buckets, fleet = tonumber(ARGV[n + 2]), ARGV[n + 3] == '1'
local gone = 0
for i = n + 4, #ARGV, 2 do
  local s, v = ARGV[i], ARGV[i + 1]
  local now = redis.call('HGET', KEYS[1], s)
  if now == v or (v == '' and not now) then
    redis.call('HDEL', KEYS[1], s)
    redis.call('HDEL', KEYS[2], s)
    redis.call('SREM', KEYS[3], s)
    for m = 2, n + 1 do redis.call('HDEL', KEYS[4], ARGV[m] .. '|' .. s) end
    for b = 0, buckets - 1 do
      local f = s .. '|' .. b
      local pairs = redis.call('HGET', KEYS[5], f)
      if pairs then
        redis.call('HINCRBY', KEYS[5], 'RETIRED|' .. b, pairs)
        redis.call('HDEL', KEYS[5], f)
      end
    end
    if fleet then redis.call('HDEL', KEYS[6], 'max_event_us|' .. s) end
    gone = gone + 1
  end
end
return gone
""".replace("RETIRED", RETIRED_SERVERS)
"""Forget servers whose newest arrival is still the one read (``''``: a server with no arrival, still none): one
that spoke again since is kept. Its delay
trade-off buckets are added to the retired servers' (:data:`RETIRED_SERVERS`): the advice over every server stays
exact. In a namespace following the fleet, its running max goes too, as its watermark did
(``rules.watermarks``)."""


FORGET_BELOW_LUA = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, b in ipairs(gone) do redis.call('UNLINK', ARGV[2] .. b) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return #gone
"""
"""An index's members scored at or below ``ARGV[1]`` leave it and their keys (``ARGV[2]`` and the member) leave Redis,
together.
For the batch records: left to their TTL (a day), the records of a day's batches stayed (172,800 per query at the
500 ms trigger, about 100 KB each at 300 servers); for the windows' players' sets and the batches' counts of them."""
