package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// Per-node scripts. A lease's value is "token:nonce:instance", as in the
// redis backend.

// An attempt record (KEYS attempt: "seq:nonce:instance", seq 20 decimal
// digits, so that string order is number order) names, per node and key,
// the latest Acquire attempt of one owner the node has applied: its
// grant, its "yours", or its undo. The attempt sequence of an owner nonce
// strictly increases (Backend.nextAttempt), so a request that arrives late
// (held in a retransmission, queued behind a connection) is known to be
// older than what the node already did for that owner. While the owner's
// lease is on the node, the record is the owner's and lives at least as
// long as the lease (acquireScript, renewScript); after a release or an
// undo it stays until its expiry, to refuse older attempts that land late.

// acquireScript: KEYS lease, counter, attempt; ARGV owner
// ("nonce:instance"), px, attempt seq. {1, token} granted; {3, token} the
// owner's lease was already there ("yours": token and expiry kept — the
// raise round extends it once the call is decided a grant, so that a call
// that fails does not keep a stray copy alive); {0, value, pttl} held by
// another;
// {2} refused: an attempt of this owner at least as new was already
// applied here (a grant, "yours" or an undo), so this one is a late copy
// whose caller has moved on — it changes nothing (no re-tag, no expiry).
const acquireScript = `
local r = redis.call('GET', KEYS[3])
local mine = r and string.sub(r, 22) == ARGV[1]
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    if mine and string.sub(r, 1, 20) > ARGV[3] then return {2} end
    redis.call('SET', KEYS[3], ARGV[3] .. ':' .. ARGV[1], 'PX', math.max(tonumber(ARGV[2]), redis.call('PTTL', KEYS[1])))
    return {3, string.sub(v, 1, i - 1)}
  end
  return {0, v, redis.call('PTTL', KEYS[1])}
end
if mine and string.sub(r, 1, 20) >= ARGV[3] then return {2} end
local t = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('SET', KEYS[1], t .. ':' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[3] .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, t}
`

// undoScript: KEYS lease, attempt; ARGV owner, channel, attempt seq, px.
// Undoes the attempt and every older one of the owner: deletes the
// owner's lease (whatever its token: a node whose reply was lost holds it
// under a token nobody read) and publishes, unless a newer attempt of the
// owner was applied here (its grant stays: a retry the undo was overtaken
// by). Whether or not there was a lease, the record then names this
// attempt, so the attempt is refused if it arrives after its undo. Another
// owner's lease, and its record, are left alone. 1 deleted, 0 not.
const undoScript = `
local r = redis.call('GET', KEYS[2])
local mine = r and string.sub(r, 22) == ARGV[1]
if mine and string.sub(r, 1, 20) > ARGV[3] then return 0 end
local v = redis.call('GET', KEYS[1])
local mark = ARGV[3] .. ':' .. ARGV[1]
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) ~= ARGV[1] or not mine then return 0 end
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], mark, 'PX', ARGV[4])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
redis.call('SET', KEYS[2], mark, 'PX', ARGV[4])
return 0
`

// raiseScript: KEYS lease, counter, attempt; ARGV owner, token, attempt
// seq, px. Raises the counter to at least token, and rewrites the owner's
// lease to carry token with expiry px (and the record to live as long) if
// the latest attempt of the owner applied here is this raise's own: a
// raise is its attempt's second round trip, sent once the attempt is
// decided a grant, to the nodes whose token differs from the grant's or
// that answered "yours" (their expiry is extended only now). It can land
// as late as the attempt, after the attempt was undone and a retry
// granted here under another token — it must not re-tag the retry's lease
// (its holder's renewals would then fail here). 1 if the owner's lease
// was rewritten.
const raiseScript = `
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[3]) ~= ARGV[3] .. ':' .. ARGV[1] then return 0 end
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[1], 'PX', ARGV[4])
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
    return 1
  end
end
return 0
`

// renewScript: KEYS lease, attempt; ARGV value, px. 1 or 0. The owner's
// attempt record is extended with the lease, so that it outlives it.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
`

// releaseScript: KEYS lease; ARGV owner, channel, token. Deletes the
// owner's lease whatever its token (a nonce names one grant; a node whose
// reply was lost may hold it under its own token) and publishes. The
// attempt record stays until it expires: an older attempt of the owner
// that lands after the release is refused.
// 1 released with this token, 2 released with another, 0 not held.
const releaseScript = `
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], '')
    if string.sub(v, 1, i - 1) == ARGV[3] then return 1 end
    return 2
  end
end
return 0
`

// getScript: KEYS lease. {value, pttl} or false.
const getScript = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
`

var (
	acquireLua = goredis.NewScript(acquireScript)
	raiseLua   = goredis.NewScript(raiseScript)
	renewLua   = goredis.NewScript(renewScript)
	releaseLua = goredis.NewScript(releaseScript)
	undoLua    = goredis.NewScript(undoScript)
	getLua     = goredis.NewScript(getScript)
)

func ownerArg(o backend.Owner) string { return o.Nonce.String() + ":" + o.Instance }

func parseValue(key, v string) (backend.Lease, error) {
	tok, rest, ok1 := strings.Cut(v, ":")
	nonce, inst, ok2 := strings.Cut(rest, ":")
	t, err := strconv.ParseUint(tok, 10, 64)
	n, nerr := backend.ParseNonce(nonce)
	if !ok1 || !ok2 || err != nil || nerr != nil {
		return backend.Lease{}, fmt.Errorf("lease %q has malformed value %q", key, v)
	}
	return backend.Lease{Key: key, Owner: backend.Owner{Instance: inst, Nonce: n}, Token: t}, nil
}

// remaining converts a node's PTTL (which includes the drift allowance)
// into a conservative remaining TTL.
func remaining(pttl time.Duration) time.Duration {
	r := (pttl - 3*time.Millisecond) * 100 / 101
	return max(r, 0)
}

type nodeReply struct {
	ok    bool
	token uint64
	// yours: the owner's lease was already on the node (ok is set too);
	// token is the token it carries.
	yours  bool
	holder string // value held by another owner
	pttl   time.Duration
	err    error
	// notSent: the request never left the node's queue (err wraps
	// ErrNotApplied), so the node holds nothing of it.
	notSent bool
	// stale: the node refused the attempt as no newer than one of the same
	// owner it already applied; it changed nothing (err says so).
	stale bool
}

// superseded: the node refused the attempt as no newer than one of the
// same owner it already applied.
func (r nodeReply) superseded() bool { return r.stale }

// errSuperseded is a node's answer to an attempt it refused as stale.
var errSuperseded = errors.New("refused: a newer attempt of this owner was applied on the node")

// attempt is the sequence number of one Acquire call: later calls of the
// Backend have greater ones (see acquireScript).
type attempt uint64

// nextAttempt returns the sequence of a new Acquire call: greater than
// every one before it on b, and, starting from the wall clock in
// nanoseconds, greater than those of an earlier Backend too unless the
// clock stepped back.
func (b *Backend) nextAttempt() attempt {
	for {
		last := b.lastAttempt.Load()
		next := max(last+1, uint64(time.Now().UnixNano()))
		if b.lastAttempt.CompareAndSwap(last, next) {
			return attempt(next)
		}
	}
}

// String is the form the scripts compare: 20 decimal digits.
func (a attempt) String() string { return fmt.Sprintf("%020d", uint64(a)) }

// acquireCall is acquireScript's keys and arguments.
func (b *Backend) acquireCall(key string, owner backend.Owner, px int64, a attempt) ([]string, []any) {
	return []string{b.leaseKey(key), b.tokenKey(key), b.attemptKey(key)}, []any{ownerArg(owner), px, a.String()}
}

// undoCall is undoScript's keys and arguments.
func (b *Backend) undoCall(key string, owner backend.Owner, px int64, a attempt) ([]string, []any) {
	return []string{b.leaseKey(key), b.attemptKey(key)}, []any{ownerArg(owner), b.channel(key), a.String(), px}
}

// raiseCall is raiseScript's keys and arguments.
func (b *Backend) raiseCall(key string, owner backend.Owner, top uint64, px int64, a attempt) ([]string, []any) {
	return []string{b.leaseKey(key), b.tokenKey(key), b.attemptKey(key)}, []any{ownerArg(owner), top, a.String(), px}
}

// renewCall is renewScript's keys and arguments.
func (b *Backend) renewCall(key string, owner backend.Owner, token uint64, px int64) ([]string, []any) {
	return []string{b.leaseKey(key), b.attemptKey(key)}, []any{strconv.FormatUint(token, 10) + ":" + ownerArg(owner), px}
}

// releaseCall is releaseScript's keys and arguments.
func (b *Backend) releaseCall(key string, owner backend.Owner, token uint64) ([]string, []any) {
	return []string{b.leaseKey(key)}, []any{ownerArg(owner), b.channel(key), strconv.FormatUint(token, 10)}
}

// acquireReply reads one node's reply to acquireScript.
func acquireReply(c *goredis.Cmd) nodeReply {
	var r nodeReply
	res, err := c.Slice()
	switch {
	case err != nil:
		r.err = err
		r.notSent = errors.Is(err, backend.ErrNotApplied)
	case len(res) == 2:
		r.ok, r.yours = true, toInt(res[0]) == 3
		r.token, r.err = strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
	case len(res) == 3:
		r.holder = fmt.Sprint(res[1])
		r.pttl = time.Duration(toInt(res[2])) * time.Millisecond
	case len(res) == 1 && toInt(res[0]) == 2:
		r.err, r.stale = errSuperseded, true
	default:
		r.err = fmt.Errorf("unexpected reply %v", res)
	}
	return r
}
