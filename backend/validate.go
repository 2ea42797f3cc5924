package backend

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The checks below are the ones every backend applies before touching its
// store, so that bad input is rejected the same way everywhere and changes
// nothing. Errors wrap ErrInvalid and name the field and the value.

// CheckKey validates a lease key or job name as stored: non-empty, at most
// MaxKeyLen bytes, valid UTF-8, no control characters.
func CheckKey(field, key string) error {
	if key == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %s %.40q… is %d bytes, more than the limit of %d", ErrInvalid, field, key, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, field, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s %q contains control character %U", ErrInvalid, field, key, r)
		}
	}
	return nil
}

// CheckOwner validates an owner: a non-empty instance name of at most
// MaxInstanceLen bytes and a non-zero nonce.
func CheckOwner(o Owner) error {
	if err := CheckKey("owner instance", o.Instance); err != nil {
		return err
	}
	if len(o.Instance) > MaxInstanceLen {
		return fmt.Errorf("%w: owner instance %.40q… is %d bytes, more than the limit of %d", ErrInvalid, o.Instance, len(o.Instance), MaxInstanceLen)
	}
	if o.Nonce.IsZero() {
		return fmt.Errorf("%w: owner nonce is zero", ErrInvalid)
	}
	return nil
}

// CheckTTL validates a TTL against the backend's minimum and MaxTTL.
func CheckTTL(ttl, minTTL time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalid, ttl)
	case ttl < minTTL:
		return fmt.Errorf("%w: ttl %v is below this backend's minimum of %v", ErrInvalid, ttl, minTTL)
	case ttl > MaxTTL:
		return fmt.Errorf("%w: ttl %v is above the maximum of %v", ErrInvalid, ttl, MaxTTL)
	}
	return nil
}

// CheckLease validates the arguments shared by Acquire and Renew.
func CheckLease(key string, o Owner, ttl, minTTL time.Duration) error {
	if err := CheckKey("key", key); err != nil {
		return err
	}
	if err := CheckOwner(o); err != nil {
		return err
	}
	return CheckTTL(ttl, minTTL)
}

// CheckToken rejects the zero token, which no grant ever returns.
func CheckToken(token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: token 0 was never granted", ErrInvalid)
	}
	return nil
}

// CheckInstant rejects a zero scheduled instant.
func CheckInstant(t time.Time) error {
	if t.IsZero() {
		return fmt.Errorf("%w: scheduled instant is zero", ErrInvalid)
	}
	if y := t.UTC().Year(); y < 1970 || y > 9999 {
		return fmt.Errorf("%w: scheduled instant %s is outside years 1970–9999", ErrInvalid, t.UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckClaim validates a ClaimRequest.
func CheckClaim(r ClaimRequest, minTTL time.Duration) error {
	if err := CheckKey("job", r.Job); err != nil {
		return err
	}
	if err := CheckInstant(r.ScheduledAt); err != nil {
		return err
	}
	if len(r.SpecVersion) > 128 {
		return fmt.Errorf("%w: spec version %.40q… is longer than 128 bytes", ErrInvalid, r.SpecVersion)
	}
	if err := CheckOwner(r.Owner); err != nil {
		return err
	}
	if r.MaxEarly < 0 {
		return fmt.Errorf("%w: max early %v is negative", ErrInvalid, r.MaxEarly)
	}
	if r.MaxLate < 0 {
		return fmt.Errorf("%w: max late %v is negative", ErrInvalid, r.MaxLate)
	}
	if r.MaxRunning < 0 {
		return fmt.Errorf("%w: max running %d is negative", ErrInvalid, r.MaxRunning)
	}
	if r.MaxAttempts < 0 {
		return fmt.Errorf("%w: max attempts %d is negative", ErrInvalid, r.MaxAttempts)
	}
	return CheckTTL(r.TTL, minTTL)
}

// CheckOutcome validates an Outcome and returns it with its texts made
// storable by CleanText.
func CheckOutcome(o Outcome) (Outcome, error) {
	if o.State != Succeeded && o.State != Failed {
		return o, fmt.Errorf("%w: outcome state %q is not %q or %q", ErrInvalid, o.State, Succeeded, Failed)
	}
	if o.Duration < 0 {
		return o, fmt.Errorf("%w: outcome duration %v is negative", ErrInvalid, o.Duration)
	}
	o.Result = CleanText(o.Result, MaxResultLen)
	o.Error = CleanText(o.Error, MaxErrorLen)
	return o, nil
}

// CheckPrune validates Prune's arguments.
func CheckPrune(olderThan time.Time, batch int) error {
	if olderThan.IsZero() {
		return fmt.Errorf("%w: prune olderThan is zero", ErrInvalid)
	}
	if batch <= 0 || batch > 10000 {
		return fmt.Errorf("%w: prune batch %d is not in 1..10000", ErrInvalid, batch)
	}
	return nil
}

// ValidText returns s as valid UTF-8 without NUL bytes: each run of invalid
// bytes and each NUL becomes U+FFFD (what strings.ToValidUTF8 does), so any
// bytes can be stored in a text column and are replaced the same way on
// every backend. Valid text, control characters included, is unchanged.
func ValidText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// CleanText returns ValidText(s) in at most n bytes. Longer text keeps its
// head and its tail (a job's last lines usually say why it failed) around a
// line "[… N bytes cut …]", each end cut on a rune boundary, so valid
// UTF-8 is never split. Finish stores results and errors through it.
func CleanText(s string, n int) string {
	s = ValidText(s)
	if len(s) <= n {
		return s
	}
	// The marker is at most this long: the count cut is below len(s).
	room := n - len(CutMarker(len(s)))
	if room <= 0 {
		return s[:runeFloor(s, n)]
	}
	head := s[:runeFloor(s, room/2)]
	tail := s[runeCeil(s, len(s)-(room-len(head))):]
	return head + CutMarker(len(s)-len(head)-len(tail)) + tail
}

// CutMarker is the line CleanText puts where it cut n bytes out.
func CutMarker(n int) string { return fmt.Sprintf("\n[… %d bytes cut …]\n", n) }

// runeFloor is the largest rune boundary of valid UTF-8 s at or below i.
func runeFloor(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// runeCeil is the smallest rune boundary of valid UTF-8 s at or above i.
func runeCeil(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// CheckRelease validates Release's arguments.
func CheckRelease(key string, o Owner, token uint64) error {
	if err := CheckKey("key", key); err != nil {
		return err
	}
	if err := CheckOwner(o); err != nil {
		return err
	}
	return CheckToken(token)
}

// CheckRenew validates a RenewRequest against the backend's minimum TTL.
func CheckRenew(r RenewRequest, minTTL time.Duration) error {
	if err := CheckLease(r.Key, r.Owner, r.TTL, minTTL); err != nil {
		return err
	}
	return CheckToken(r.Token)
}

// CheckHeld validates the occurrence and owner arguments shared by
// Heartbeat and Finish.
func CheckHeld(job string, at time.Time, o Owner, token uint64) error {
	if err := CheckKey("job", job); err != nil {
		return err
	}
	if err := CheckInstant(at); err != nil {
		return err
	}
	if err := CheckOwner(o); err != nil {
		return err
	}
	return CheckToken(token)
}

// CheckHeartbeat validates a HeartbeatRequest against the backend's
// minimum TTL.
func CheckHeartbeat(r HeartbeatRequest, minTTL time.Duration) error {
	if err := CheckHeld(r.Job, r.ScheduledAt, r.Owner, r.Token); err != nil {
		return err
	}
	return CheckTTL(r.TTL, minTTL)
}

// CheckFinish validates a FinishRequest and returns it with its outcome's
// texts made storable (see CheckOutcome).
func CheckFinish(r FinishRequest) (FinishRequest, error) {
	if err := CheckHeld(r.Job, r.ScheduledAt, r.Owner, r.Token); err != nil {
		return r, err
	}
	out, err := CheckOutcome(r.Outcome)
	if err != nil {
		return r, err
	}
	r.Outcome = out
	return r, nil
}
