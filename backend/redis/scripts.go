package redis

import goredis "github.com/redis/go-redis/v9"

// Lease scripts. KEYS[1] is the lease, KEYS[2] its token counter (same hash
// slot). A lease's value is "token:nonce:instance".

// acquireScript: ARGV nonce, instance, ttl ms.
// Returns {1, token} for a grant, or for a retry by the same owner (whose
// expiry it moves to ttl from now, so the retry's send time is a safe base
// for the holder's deadline); {0, value, pttl} when held by another owner.
const acquireScript = `
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  local tok = string.sub(v, 1, i - 1)
  if string.sub(v, i + 1) == ARGV[1] .. ':' .. ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {1, tok}
  end
  return {0, v, redis.call('PTTL', KEYS[1])}
end
local t = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('SET', KEYS[1], t .. ':' .. ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return {1, t}
`

// renewScript: ARGV value, ttl ms. Returns 1 if renewed, 0 if not held.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`

// releaseScript: KEYS[1] lease; ARGV value, channel. Deletes the lease
// (never the counter) and publishes the release. Returns 1 or 0.
const releaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
`

// getScript: KEYS[1] lease. Returns {value, pttl} or false.
const getScript = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
`

// Ledger scripts. ARGV[1] is the ledger prefix L; every key is L..something
// and carries the hash tag {ledger}, so all are in one slot. KEYS[1] (L..
// 'all') routes the call in a Cluster. Times are integers formatted with
// %d: Lua would print large numbers in exponent form.
//
//	L..'job:'..J          hash c (claim counter), h (high-water ms), v (its spec)
//	L..'run:'..ms..':'..J hash, one per occurrence (fields below)
//	L..'hist:'..J         zset member ms, score ms
//	L..'active:'..J       zset member ms, score runner's expiry µs (running only)
//	L..'all'              zset member ms..':'..J, score ms
//	L..'fin'              zset member ms..':'..J, score finish time µs
//
// Run fields: j job, at ms, v spec, i instance, n nonce, t token, a attempt,
// s state, c claimed µs, f finished µs (0), d duration ns, r result,
// e error, x runner's lease expiry µs.
const ledgerLib = `
local L = ARGV[1]
local function d(x) return string.format('%d', x) end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function hget(k)
  local a = redis.call('HGETALL', k)
  if #a == 0 then return nil, a end
  local h = {}
  for i = 1, #a, 2 do h[a[i]] = a[i + 1] end
  return h, a
end
local function finished(s) return s == 'succeeded' or s == 'failed' or s == 'abandoned' end
`

// claimScript: ARGV L, job, ms, spec, instance, nonce, ttl µs, maxEarly µs,
// maxRunning, maxLate µs (0: no bound). Returns {1, token} | {2, now, run}
// claimed | {3, now} too early | {4, running} overlap | {5, now} too late.
// The record is looked at first: a retry by the same nonce is "yours" and
// another owner is told the holder, however late.
const claimScript = ledgerLib + `
local job, ms, inst, nonce = ARGV[2], ARGV[3], ARGV[5], ARGV[6]
local now = now_us()
local k = L .. 'run:' .. ms .. ':' .. job
local r, raw = hget(k)
if r then
  if r.s == 'running' and r.i == inst and r.n == nonce then
    local exp = d(now + tonumber(ARGV[7]))
    redis.call('HSET', k, 'x', exp)
    redis.call('ZADD', L .. 'active:' .. job, exp, ms)
    return {1, r.t}
  end
  return {2, d(now), raw}
end
if tonumber(ms) * 1000 > now + tonumber(ARGV[8]) then return {3, d(now)} end
local maxl = tonumber(ARGV[10])
if maxl > 0 and tonumber(ms) * 1000 < now - maxl then return {5, d(now)} end
local maxr = tonumber(ARGV[9])
if maxr > 0 then
  local n = redis.call('ZCOUNT', L .. 'active:' .. job, '(' .. d(now), '+inf')
  if n >= maxr then return {4, n} end
end
local jk = L .. 'job:' .. job
local c = d(redis.call('HINCRBY', jk, 'c', 1))
local h = redis.call('HGET', jk, 'h')
if not h or tonumber(ms) > tonumber(h) then redis.call('HSET', jk, 'h', ms, 'v', ARGV[4]) end
local exp = d(now + tonumber(ARGV[7]))
redis.call('HSET', k, 'j', job, 'at', ms, 'v', ARGV[4], 'i', inst, 'n', nonce, 't', c, 'a', '1',
  's', 'running', 'c', d(now), 'f', '0', 'd', '0', 'r', '', 'e', '', 'x', exp)
redis.call('ZADD', L .. 'hist:' .. job, ms, ms)
redis.call('ZADD', L .. 'all', ms, ms .. ':' .. job)
redis.call('ZADD', L .. 'active:' .. job, exp, ms)
return {1, c}
`

// heldLib: is run r held live by ARGV instance, nonce, token at now?
const heldLib = `
local function held(r, inst, nonce, tok, now)
  return r and r.s == 'running' and r.i == inst and r.n == nonce and r.t == tok and now < tonumber(r.x)
end
`

// heartbeatScript: ARGV L, job, ms, instance, nonce, token, ttl µs. 1 or 0.
const heartbeatScript = ledgerLib + heldLib + `
local job, ms = ARGV[2], ARGV[3]
local now = now_us()
local k = L .. 'run:' .. ms .. ':' .. job
local r = hget(k)
if not held(r, ARGV[4], ARGV[5], ARGV[6], now) then return 0 end
local exp = d(now + tonumber(ARGV[7]))
redis.call('HSET', k, 'x', exp)
redis.call('ZADD', L .. 'active:' .. job, exp, ms)
return 1
`

// finishScript: ARGV L, job, ms, instance, nonce, token, state, duration ns,
// result, error. 1 when recorded, or when this exact outcome was already
// recorded by the same owner+token (a retried request); else 0.
const finishScript = ledgerLib + heldLib + `
local job, ms = ARGV[2], ARGV[3]
local now = now_us()
local k = L .. 'run:' .. ms .. ':' .. job
local r = hget(k)
if r and finished(r.s) and r.i == ARGV[4] and r.n == ARGV[5] and r.t == ARGV[6] and r.s == ARGV[7]
  and r.d == ARGV[8] and r.r == ARGV[9] and r.e == ARGV[10] then
  return 1
end
if not held(r, ARGV[4], ARGV[5], ARGV[6], now) then return 0 end
redis.call('HSET', k, 's', ARGV[7], 'd', ARGV[8], 'r', ARGV[9], 'e', ARGV[10], 'f', d(now))
redis.call('ZREM', L .. 'active:' .. job, ms)
redis.call('ZADD', L .. 'fin', d(now), ms .. ':' .. job)
return 1
`

// reclaimScript: ARGV L, job, ms, spec, instance, nonce, ttl µs,
// maxRunning, maxAttempts. {0} never claimed | {1, token, now, run} |
// {2, now, run} finished | {3, holder instance} not expired | {4, running}
// overlap (the job's other occurrences under live leases; this one's lease
// expired, so it is not among them) | {5, attempt} exhausted (the run
// already has maxAttempts > 0 attempts).
const reclaimScript = ledgerLib + `
local job, ms, inst, nonce = ARGV[2], ARGV[3], ARGV[5], ARGV[6]
local now = now_us()
local k = L .. 'run:' .. ms .. ':' .. job
local r, raw = hget(k)
if not r then return {0} end
local exp = d(now + tonumber(ARGV[7]))
if r.s == 'running' and r.i == inst and r.n == nonce then
  redis.call('HSET', k, 'x', exp)
  redis.call('ZADD', L .. 'active:' .. job, exp, ms)
  return {1, r.t, d(now), redis.call('HGETALL', k)}
end
if r.s ~= 'running' then return {2, d(now), raw} end
if now < tonumber(r.x) then return {3, r.i} end
local maxa = tonumber(ARGV[9])
if maxa > 0 and tonumber(r.a) >= maxa then return {5, r.a} end
local maxr = tonumber(ARGV[8])
if maxr > 0 then
  local n = redis.call('ZCOUNT', L .. 'active:' .. job, '(' .. d(now), '+inf')
  if n >= maxr then return {4, n} end
end
local c = d(redis.call('HINCRBY', L .. 'job:' .. job, 'c', 1))
redis.call('HSET', k, 'i', inst, 'n', nonce, 't', c, 'a', d(tonumber(r.a) + 1), 'v', ARGV[4], 'c', d(now), 'x', exp)
redis.call('ZADD', L .. 'active:' .. job, exp, ms)
return {1, c, d(now), redis.call('HGETALL', k)}
`

// abandonScript: ARGV L, job, ms. {0} | {1, now, run} | {2, now, run}
// finished | {3, holder instance} not expired.
const abandonScript = ledgerLib + `
local job, ms = ARGV[2], ARGV[3]
local now = now_us()
local k = L .. 'run:' .. ms .. ':' .. job
local r, raw = hget(k)
if not r then return {0} end
if r.s ~= 'running' then return {2, d(now), raw} end
if now < tonumber(r.x) then return {3, r.i} end
redis.call('HSET', k, 's', 'abandoned', 'f', d(now))
redis.call('ZREM', L .. 'active:' .. job, ms)
redis.call('ZADD', L .. 'fin', d(now), ms .. ':' .. job)
return {1, d(now), redis.call('HGETALL', k)}
`

// getRunScript: ARGV L, job, ms. {now, run} (run empty when missing).
const getRunScript = ledgerLib + `
return {d(now_us()), redis.call('HGETALL', L .. 'run:' .. ARGV[3] .. ':' .. ARGV[2])}
`

// listRunsScript: ARGV L, job (” = all), state (” = any), min score, max
// score (ZREVRANGEBYSCORE bounds), limit, budget. {now, resume, run, run,
// ...} newest first. It reads at most budget records, but never stops
// inside one instant (score): if it stopped for the budget before the
// limit was met or the range ran out, resume is the last instant read, and
// the next call lists below it; otherwise resume is ”. (Without a job the
// range is the whole ledger: one script over all of it would block the
// server for as long.)
const listRunsScript = ledgerLib + `
local job, state, limit, budget = ARGV[2], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7])
local key = L .. 'all'
if job ~= '' then key = L .. 'hist:' .. job end
local out = {d(now_us()), ''}
local off, read, last = 0, 0, nil
while #out - 2 < limit do
  local ms = redis.call('ZREVRANGEBYSCORE', key, ARGV[5], ARGV[4], 'WITHSCORES', 'LIMIT', off, 256)
  if #ms == 0 then return out end
  for i = 1, #ms, 2 do
    local m, sc = ms[i], ms[i + 1]
    if read >= budget and sc ~= last then
      out[2] = last
      return out
    end
    read, last = read + 1, sc
    local rk = L .. 'run:' .. m
    if job ~= '' then rk = rk .. ':' .. job end
    local a = {}
    -- without a job, runs only: a name with '!' is job metadata (backend.MetaSep)
    if job ~= '' or not string.find(m, '!', 1, true) then a = redis.call('HGETALL', rk) end
    if #a > 0 then
      local ok = state == ''
      if not ok then
        for j = 1, #a, 2 do if a[j] == 's' then ok = a[j + 1] == state end end
      end
      if ok then
        out[#out + 1] = a
        if #out - 2 >= limit then return out end
      end
    end
  end
  off = off + #ms / 2
end
return out
`

// pruneScript: ARGV L, max finish score (exclusive, "(µs"), batch. Deletes
// up to batch finished runs; returns how many.
const pruneScript = ledgerLib + `
local ms = redis.call('ZRANGEBYSCORE', L .. 'fin', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(ms) do
  local i = string.find(m, ':', 1, true)
  local at, job = string.sub(m, 1, i - 1), string.sub(m, i + 1)
  redis.call('DEL', L .. 'run:' .. m)
  redis.call('ZREM', L .. 'hist:' .. job, at)
  redis.call('ZREM', L .. 'all', m)
  redis.call('ZREM', L .. 'fin', m)
end
return #ms
`

// Record scripts (backend.Records). ARGV[1] is the records prefix R
// (prefix..'{records}:'); every key is R..something and carries the hash
// tag {records}, apart from the ledger's, so all are in one slot. KEYS[1]
// (R..'exp') routes the call in a Cluster. A seq S is stored as its 19
// zero-padded digits (recordSeq), so that text order is numeric order and
// no number passes through a Lua double or a score; a name N follows a
// fixed-width part or a fixed prefix, so no two names share a key.
//
//	R..'r:'..S..':'..N   hash, one per record: v value, i instance, n nonce,
//	                     e expires ms ('' when none)
//	R..'s:'..N           zset of the name's seqs: member S, score 0 (by lex)
//	R..'exp'             zset member S..':'..N, score expires ms (records
//	                     with an Expires only; ms are exact in a double)

// createRecordScript: ARGV R, name, seq, value, instance, nonce, expires.
// {1} stored | {0, {seq, value, instance, nonce, expires}} of the record
// already there.
const createRecordScript = `
local R, name, seq, e = ARGV[1], ARGV[2], ARGV[3], ARGV[7]
local k = R .. 'r:' .. seq .. ':' .. name
local a = redis.call('HMGET', k, 'v', 'i', 'n', 'e')
if a[2] then return {0, seq, a[1] or '', a[2], a[3] or '', a[4] or ''} end
redis.call('HSET', k, 'v', ARGV[4], 'i', ARGV[5], 'n', ARGV[6], 'e', e)
redis.call('ZADD', R .. 's:' .. name, 0, seq)
if e ~= '' then redis.call('ZADD', R .. 'exp', e, seq .. ':' .. name) end
return {1}
`

// listRecordsScript: ARGV R, name, max (ZREVRANGEBYLEX bound: '+' or
// '('..S), limit. {{seq, value, instance, nonce, expires}, ...} greatest
// seq first.
const listRecordsScript = `
local R, name = ARGV[1], ARGV[2]
local seqs = redis.call('ZREVRANGEBYLEX', R .. 's:' .. name, ARGV[3], '-', 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, seq in ipairs(seqs) do
  local a = redis.call('HMGET', R .. 'r:' .. seq .. ':' .. name, 'v', 'i', 'n', 'e')
  if a[2] then out[#out + 1] = {seq, a[1] or '', a[2], a[3] or '', a[4] or ''} end
end
return out
`

// deleteRecordScript: ARGV R, name, seq, instance, nonce. 1 deleted | 0
// no record of that owner there.
const deleteRecordScript = `
local R, name, seq = ARGV[1], ARGV[2], ARGV[3]
local k = R .. 'r:' .. seq .. ':' .. name
local a = redis.call('HMGET', k, 'i', 'n')
if a[1] ~= ARGV[4] or a[2] ~= ARGV[5] then return 0 end
redis.call('DEL', k)
redis.call('ZREM', R .. 's:' .. name, seq)
redis.call('ZREM', R .. 'exp', seq .. ':' .. name)
return 1
`

// pruneRecordsScript: ARGV R, max expires score (exclusive, "(ms"),
// batch. Deletes up to batch records that expired before it; returns how
// many.
const pruneRecordsScript = `
local R = ARGV[1]
local ms = redis.call('ZRANGEBYSCORE', R .. 'exp', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(ms) do
  local seq, name = string.sub(m, 1, 19), string.sub(m, 21)
  redis.call('DEL', R .. 'r:' .. m)
  redis.call('ZREM', R .. 's:' .. name, seq)
  redis.call('ZREM', R .. 'exp', m)
end
return #ms
`

var (
	acquireLua   = goredis.NewScript(acquireScript)
	renewLua     = goredis.NewScript(renewScript)
	releaseLua   = goredis.NewScript(releaseScript)
	getLua       = goredis.NewScript(getScript)
	claimLua     = goredis.NewScript(claimScript)
	heartbeatLua = goredis.NewScript(heartbeatScript)
	finishLua    = goredis.NewScript(finishScript)
	reclaimLua   = goredis.NewScript(reclaimScript)
	abandonLua   = goredis.NewScript(abandonScript)
	getRunLua    = goredis.NewScript(getRunScript)
	listRunsLua  = goredis.NewScript(listRunsScript)
	pruneLua     = goredis.NewScript(pruneScript)

	createRecordLua = goredis.NewScript(createRecordScript)
	listRecordsLua  = goredis.NewScript(listRecordsScript)
	deleteRecordLua = goredis.NewScript(deleteRecordScript)
	pruneRecordsLua = goredis.NewScript(pruneRecordsScript)
)
