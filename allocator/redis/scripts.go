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

// leaseScript takes a block: KEYS counter, settings, identity, local leases; ARGV size, size*stride,
// stride, offset mod stride, floor, first (the first counter of this instance's residue at or above the
// namespace's start), the instance's id, MaxInt64-stride (the highest last ID whose counter still
// fits), the max_id this process knows, the local floor, the namespace. Like the MySQL lease statement
// it carries its own proof: it refuses, changing nothing, when the instance is no longer the one whose
// offset claim was checked (its id differs or is gone: its data was wiped or replaced), the counter is
// below the floor (the highest counter seen there by this process or read in a peer's water marks: the
// instance went back in time), the instance counted fewer leases of the namespace than the local floor
// ('copy': a replica promoted in its place, see below), the namespace is missing, the size is above the
// namespace's maximum, the counter is not of this instance's residue, or no ID is left at or below the
// ceiling — the lower of the namespace's max_id and the one this process knows ('ceiling'). A counter
// below first is raised to it. A block that would pass the ceiling is cut to the IDs left below it.
//
// Each lease also counts itself in the local leases hash, written to the append-only file but never
// sent to replicas (redis.set_repl): a replica holds the count of its last full copy, so one promoted
// in the instance's place counts fewer leases than the water marks of the count, while its counters,
// which replicate, may not be behind theirs.
//
// On success it returns the counter before the lease, the block's first ID, the block's size and the
// namespace's local lease count.
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
local here = redis.call('HGET', KEYS[4], ARGV[11]) or '0'
if not canonical(here) then return {'corrupt', here} end
if less(here, ARGV[10]) then return {'copy', here} end
local top = redis.call('HGET', KEYS[2], 'max_id') or '9223372036854775807'
if not canonical(top) then return {'corrupt', top} end
if less(ARGV[9], top) then top = ARGV[9] end
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
redis.set_repl(redis.REPL_AOF)
local count = redis.call('HINCRBY', KEYS[4], ARGV[11], 1)
redis.set_repl(redis.REPL_ALL)
return {'ok', base, tostring(n), string.format('%.0f', count)}
`)

// createScript creates a namespace on one instance, or completes a half-made one: KEYS settings,
// counter, index; ARGV name, first counter, start, floor, block_size, max_block_size, lease_ttl_ms,
// updated_us, max_id, max_id_us. An existing counter is never moved back.
var createScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('GET', KEYS[2])
if cur and not canonical(cur) then return {'corrupt', cur} end
local had = redis.call('EXISTS', KEYS[1]) == 1
if had and cur then return {'exists'} end
if not had then
  redis.call('HSET', KEYS[1], 'start', ARGV[3], 'floor', ARGV[4], 'block_size', ARGV[5],
    'max_block_size', ARGV[6], 'lease_ttl_ms', ARGV[7], 'created_us', ARGV[8], 'updated_us', ARGV[8], 'max_id', ARGV[9],
    'max_id_us', ARGV[10])
end
if not cur or less(cur, ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('SADD', KEYS[3], ARGV[1])
if had then return {'repaired'} end
return {'created'}
`)

// updateScript changes a namespace's settings on one instance: KEYS settings, counter; ARGV
// block_size, max_block_size, lease_ttl_ms, updated_us, floor (0: none), the floor as a counter of this
// instance, max_id, max_id_us, the highest counter that issued nothing above max_id (0: none fits, as
// near MaxInt64), the water mark (the highest counter seen there; 0: none). Settings older than the
// stored ones are ignored, the ceiling by its own time (max_id_us); the floor and the counter only
// rise. A counter below the water mark went back in time: nothing changes ('behind'), as a lease would
// refuse it. A ceiling that would lower the stored one below an ID the instance issued (its counter
// above the limit) changes nothing ('passed').
var updateScript = goredis.NewScript(luaHelpers + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'missing'} end
if not canonical(cur) then return {'corrupt', cur} end
if less(cur, ARGV[10]) then return {'behind', cur} end
local top = redis.call('HGET', KEYS[1], 'max_id') or '9223372036854775807'
local topUS = redis.call('HGET', KEYS[1], 'max_id_us') or '0'
if not canonical(top) or not canonical(topUS) then return {'corrupt', top .. ' ' .. topUS} end
local lower = less(ARGV[7], top) and not less(ARGV[8], topUS)
if lower and ARGV[9] ~= '0' and less(ARGV[9], cur) then return {'passed', cur} end
local u = redis.call('HGET', KEYS[1], 'updated_us')
if not u or not canonical(u) or not less(ARGV[4], u) then
  redis.call('HSET', KEYS[1], 'block_size', ARGV[1], 'max_block_size', ARGV[2], 'lease_ttl_ms', ARGV[3],
    'updated_us', ARGV[4])
end
if less(topUS, ARGV[8]) or lower then
  redis.call('HSET', KEYS[1], 'max_id', ARGV[7], 'max_id_us', ARGV[8])
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

// paceScript records what one process leased from an instance, on a peer: KEYS the peer's rates,
// leased, windows, fleet rates, intervals; ARGV the window (microseconds: the process's water-mark
// interval, which also raises intervals, for a repair's margin to cover the longest), then
// per namespace the field ("offset:namespace"), the process's rate and the counter units it leased
// since its last write. The rate raises rates (the fastest one process leased); the units are added to
// leased (what every process leased); and once a window of the peer's own clock has passed since the
// field's window began, the rate of that sum over it raises fleet (the fastest every process together
// leased). A window is "leased:microseconds" at its start.
var paceScript = goredis.NewScript(luaHelpers + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
for i = 2, #ARGV, 3 do
  local f, rate, span = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local cur = redis.call('HGET', KEYS[1], f)
  if not cur or not canonical(cur) or less(cur, rate) then redis.call('HSET', KEYS[1], f, rate) end
  local total = redis.call('HINCRBY', KEYS[2], f, span)
  local from, at = string.match(redis.call('HGET', KEYS[3], f) or '', '^(%d+):(%d+)$')
  if from and now - tonumber(at) >= window then
    local r = math.floor((total - tonumber(from)) * 1000000 / (now - tonumber(at)))
    local peak = tonumber(redis.call('HGET', KEYS[4], f) or '0') or 0
    if r > peak then redis.call('HSET', KEYS[4], f, string.format('%.0f', r)) end
  end
  if not from or now - tonumber(at) >= window then
    redis.call('HSET', KEYS[3], f, string.format('%.0f', total) .. ':' .. string.format('%.0f', now))
  end
  local iv = redis.call('HGET', KEYS[5], f)
  if not iv or not canonical(iv) or less(iv, ARGV[1]) then redis.call('HSET', KEYS[5], f, ARGV[1]) end
end
return 'ok'
`)

// raiseLocalScript raises an instance's local lease count of a namespace to at least a value, written
// to the append-only file and never sent to replicas, like the lease's own count: KEYS local leases;
// ARGV namespace, value. A repair uses it, so that the instance passes the water marks of the count
// again.
var raiseLocalScript = goredis.NewScript(luaHelpers + `
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
if not canonical(cur) or less(cur, ARGV[2]) then
  redis.set_repl(redis.REPL_AOF)
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.set_repl(redis.REPL_ALL)
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
