package redis

import goredis "github.com/redis/go-redis/v9"

// Lua numbers are doubles, exact only below 2^53, while counters reach 2^63-1. So the scripts never do
// arithmetic on a counter: they compare decimal strings, compute residues digit by digit, and leave
// the addition to INCRBY, which works on int64 and refuses to overflow without changing the key.
const luaHelpers = `
local function canonical(s)
  return s == '0' or string.match(s, '^[1-9]%d*$') ~= nil
end
-- less compares two canonical non-negative decimal strings.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function residue(s, m)
  local r = 0
  for i = 1, #s do r = (r * 10 + string.byte(s, i) - 48) % m end
  return r
end
`

// leaseScript takes a block: KEYS counter, settings; ARGV size, size*stride, stride, offset mod stride.
// It refuses, changing nothing, when the namespace is missing on this instance, the size is above the
// namespace's maximum, the counter is not of this instance's residue, or the block would pass
// MaxInt64. On success it returns the counter before the lease, the block's first ID.
var leaseScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('GET', KEYS[1])
if not cur then return {'missing'} end
if not canonical(cur) then return {'corrupt', cur} end
local max = redis.call('HGET', KEYS[2], 'max_block_size')
if not max then return {'missing'} end
if tonumber(ARGV[1]) > tonumber(max) then return {'size', max} end
if residue(cur, tonumber(ARGV[3])) ~= tonumber(ARGV[4]) then return {'residue', cur} end
local r = redis.pcall('INCRBY', KEYS[1], ARGV[2])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'overflow', 1, true) then return {'exhausted', cur} end
  return {'corrupt', cur}
end
return {'ok', cur}
`)

// createScript creates a namespace on one instance, or completes a half-made one: KEYS settings,
// counter, index; ARGV name, first counter, start, floor, block_size, max_block_size, lease_ttl_ms,
// updated_us. An existing counter is never moved back.
var createScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('GET', KEYS[2])
if cur and not canonical(cur) then return {'corrupt', cur} end
local had = redis.call('EXISTS', KEYS[1]) == 1
if had and cur then return {'exists'} end
if not had then
  redis.call('HSET', KEYS[1], 'start', ARGV[3], 'floor', ARGV[4], 'block_size', ARGV[5],
    'max_block_size', ARGV[6], 'lease_ttl_ms', ARGV[7], 'created_us', ARGV[8], 'updated_us', ARGV[8])
end
if not cur or less(cur, ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('SADD', KEYS[3], ARGV[1])
if had then return {'repaired'} end
return {'created'}
`)

// updateScript changes a namespace's settings on one instance: KEYS settings, counter; ARGV
// block_size, max_block_size, lease_ttl_ms, updated_us, floor (0: none), the floor as a counter of this
// instance. Settings older than the stored ones are ignored; the floor and the counter only rise.
var updateScript = goredis.NewScript(luaHelpers + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'missing'} end
if not canonical(cur) then return {'corrupt', cur} end
local u = redis.call('HGET', KEYS[1], 'updated_us')
if not u or not canonical(u) or not less(ARGV[4], u) then
  redis.call('HSET', KEYS[1], 'block_size', ARGV[1], 'max_block_size', ARGV[2], 'lease_ttl_ms', ARGV[3],
    'updated_us', ARGV[4])
end
if ARGV[5] ~= '0' then
  local f = redis.call('HGET', KEYS[1], 'floor')
  if not f or not canonical(f) or less(f, ARGV[5]) then redis.call('HSET', KEYS[1], 'floor', ARGV[5]) end
  if less(cur, ARGV[6]) then redis.call('SET', KEYS[2], ARGV[6]) end
end
return {'ok'}
`)

// identityScript records which offset of which stride an instance serves, the first time it is used,
// and afterwards reports a mismatch: KEYS identity; ARGV stride, offset, address, now_us.
var identityScript = goredis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'stride', 'offset', 'addr')
if not v[1] then
  redis.call('HSET', KEYS[1], 'stride', ARGV[1], 'offset', ARGV[2], 'addr', ARGV[3], 'claimed_us', ARGV[4])
  return {'claimed'}
end
if v[1] == ARGV[1] and v[2] == ARGV[2] then return {'ok'} end
return {'conflict', v[1], v[2] or '', v[3] or ''}
`)
