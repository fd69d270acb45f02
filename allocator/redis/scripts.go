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
local function trim(s)
  s = string.gsub(s, '^0+', '')
  if s == '' then return '0' end
  return s
end
-- sub is a - b for canonical decimal strings, a not below b.
local function sub(a, b)
  local out, borrow, j = {}, 0, #b
  for i = #a, 1, -1 do
    local d = string.byte(a, i) - 48 - borrow
    if j >= 1 then d = d - (string.byte(b, j) - 48) end
    if d < 0 then d, borrow = d + 10, 1 else borrow = 0 end
    out[#out + 1] = string.char(d + 48)
    j = j - 1
  end
  return trim(string.reverse(table.concat(out)))
end
-- quot is floor(s / m) for a canonical decimal string and a small positive integer m.
local function quot(s, m)
  local out, r = {}, 0
  for i = 1, #s do
    r = r * 10 + string.byte(s, i) - 48
    out[#out + 1] = string.char(math.floor(r / m) + 48)
    r = r % m
  end
  return trim(table.concat(out))
end
`

// leaseScript takes a block: KEYS counter, settings, identity; ARGV size, size*stride, stride, offset
// mod stride, floor, first (the first counter of this instance's residue at or above the namespace's
// start), the instance's id, MaxInt64-stride (the highest last ID whose counter still fits). Like the
// MySQL lease statement it carries its own proof: it refuses, changing nothing, when the instance is no
// longer the one whose offset claim was checked (its id differs or is gone: its data was wiped or
// replaced), the counter is below the floor (the highest counter seen there by this process or read
// in a peer's water marks: the instance went back in time), the namespace is missing, the size is
// above the namespace's maximum, the counter is not of this instance's residue, or no ID is left at
// or below the namespace's max_id ('ceiling'). A counter below first is raised to it. A block that
// would pass max_id is cut to the IDs left below it. On success it returns the counter before the
// lease, the block's first ID, and the block's size.
var leaseScript = goredis.NewScript(luaHelpers + `
local id = redis.call('HGET', KEYS[3], 'id')
if id ~= ARGV[7] then return {'identity', id or ''} end
local cur = redis.call('GET', KEYS[1])
if not cur then return {'missing'} end
if not canonical(cur) then return {'corrupt', cur} end
local max = redis.call('HGET', KEYS[2], 'max_block_size')
if not max then return {'missing'} end
if tonumber(ARGV[1]) > tonumber(max) then return {'size', max} end
if residue(cur, tonumber(ARGV[3])) ~= tonumber(ARGV[4]) then return {'residue', cur} end
if less(cur, ARGV[5]) then return {'behind', cur} end
local top = redis.call('HGET', KEYS[2], 'max_id') or '9223372036854775807'
if not canonical(top) then return {'corrupt', top} end
local ceiling = top
if less(ARGV[8], ceiling) then ceiling = ARGV[8] end
local base = cur
if less(base, ARGV[6]) then base = ARGV[6] end
if less(ceiling, base) then return {'ceiling', base, top} end
local n, by = tonumber(ARGV[1]), ARGV[2]
local fit = quot(sub(ceiling, base), tonumber(ARGV[3]))
if less(fit, tostring(n - 1)) then
  n = tonumber(fit) + 1
  by = string.format('%.0f', n * tonumber(ARGV[3]))
end
if base ~= cur then redis.call('SET', KEYS[1], base) end
local r = redis.pcall('INCRBY', KEYS[1], by)
if type(r) == 'table' and r.err then
  if string.find(r.err, 'overflow', 1, true) then return {'exhausted', base} end
  return {'corrupt', base}
end
return {'ok', base, tostring(n)}
`)

// createScript creates a namespace on one instance, or completes a half-made one: KEYS settings,
// counter, index; ARGV name, first counter, start, floor, block_size, max_block_size, lease_ttl_ms,
// updated_us, max_id. An existing counter is never moved back.
var createScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('GET', KEYS[2])
if cur and not canonical(cur) then return {'corrupt', cur} end
local had = redis.call('EXISTS', KEYS[1]) == 1
if had and cur then return {'exists'} end
if not had then
  redis.call('HSET', KEYS[1], 'start', ARGV[3], 'floor', ARGV[4], 'block_size', ARGV[5],
    'max_block_size', ARGV[6], 'lease_ttl_ms', ARGV[7], 'created_us', ARGV[8], 'updated_us', ARGV[8], 'max_id', ARGV[9])
end
if not cur or less(cur, ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('SADD', KEYS[3], ARGV[1])
if had then return {'repaired'} end
return {'created'}
`)

// updateScript changes a namespace's settings on one instance: KEYS settings, counter; ARGV
// block_size, max_block_size, lease_ttl_ms, updated_us, floor (0: none), the floor as a counter of this
// instance, max_id, limit (0: none), the water mark (the highest counter seen there; 0: none).
// Settings older than the stored ones are ignored; the floor and the counter only rise. A counter below
// the water mark went back in time: nothing changes ('behind'), as a lease would refuse it. With a
// limit (a lowered max_id plus the stride) it changes nothing when the counter is above it, an ID
// above the new max_id having been issued ('passed').
var updateScript = goredis.NewScript(luaHelpers + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'missing'} end
if not canonical(cur) then return {'corrupt', cur} end
if less(cur, ARGV[9]) then return {'behind', cur} end
if ARGV[8] ~= '0' and less(ARGV[8], cur) then return {'passed', cur} end
local u = redis.call('HGET', KEYS[1], 'updated_us')
if not u or not canonical(u) or not less(ARGV[4], u) then
  redis.call('HSET', KEYS[1], 'block_size', ARGV[1], 'max_block_size', ARGV[2], 'lease_ttl_ms', ARGV[3],
    'updated_us', ARGV[4], 'max_id', ARGV[7])
end
if ARGV[5] ~= '0' then
  local f = redis.call('HGET', KEYS[1], 'floor')
  if not f or not canonical(f) or less(f, ARGV[5]) then redis.call('HSET', KEYS[1], 'floor', ARGV[5]) end
  if less(cur, ARGV[6]) then redis.call('SET', KEYS[2], ARGV[6]) end
end
return {'ok'}
`)

// claimScript gives an instance its identity, or checks the one it has: KEYS identity, claims; ARGV
// stride, offset, address, now_us, a new id (used only when the instance has none). An instance
// without an identity whose own claims still name a holder of the offset lost part of its data:
// 'lost'. One that holds another offset or stride: 'conflict'. Otherwise it returns 'ok', its id and
// whether its claim was proven exclusive (every other instance recorded it).
var claimScript = goredis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'stride', 'offset', 'addr', 'id', 'proven')
if not v[1] then
  local holder = redis.call('HGET', KEYS[2], ARGV[2])
  if holder then return {'lost', holder} end
  redis.call('HSET', KEYS[1], 'stride', ARGV[1], 'offset', ARGV[2], 'addr', ARGV[3], 'claimed_us', ARGV[4], 'id', ARGV[5])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
  return {'ok', ARGV[5], '0'}
end
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return {'conflict', v[1], v[2] or '', v[3] or ''} end
local id = v[4]
if not id then
  id = ARGV[5]
  redis.call('HSET', KEYS[1], 'id', id)
end
local holder = redis.call('HGET', KEYS[2], ARGV[2])
if not holder then
  redis.call('HSET', KEYS[2], ARGV[2], id)
elseif holder ~= id then
  return {'taken', holder, id}
end
return {'ok', id, v[5] or '0'}
`)

// recordClaimScript records on a peer that an offset is held by an instance id: KEYS the peer's claims,
// the peer's identity; ARGV offset, id. It refuses when the peer itself holds that offset under another
// id, or records another holder of it ('taken').
var recordClaimScript = goredis.NewScript(`
local own = redis.call('HMGET', KEYS[2], 'offset', 'id')
if own[1] == ARGV[1] and own[2] ~= ARGV[2] then return {'conflict', own[2] or ''} end
local holder = redis.call('HGET', KEYS[1], ARGV[1])
if holder and holder ~= ARGV[2] then return {'taken', holder} end
if not holder then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return {'ok'}
`)

// raiseScript raises hash fields to at least the given values: KEYS hash; ARGV field, value, field,
// value… (canonical decimal strings). Water marks and lease rates only ever rise.
var raiseScript = goredis.NewScript(luaHelpers + `
for i = 1, #ARGV, 2 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if not cur or not canonical(cur) or less(cur, ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 'ok'
`)

// raiseCounterScript raises a counter to at least a value, never lowering it: KEYS counter; ARGV value.
var raiseCounterScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('GET', KEYS[1])
if cur and not canonical(cur) then return {'corrupt', cur} end
if not cur or less(cur, ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return {'ok'}
`)
