// Package leasehold makes work that must happen once happen once while a
// service runs as many instances: distributed locks with renewed leases and
// fencing tokens (Locker), and leader election (Elector), over any backend
// that implements the small contract in package backend.
//
// # What is guaranteed
//
// No lock service can stop a paused process (GC, SIGSTOP, VM steal) from
// waking up after its lease expired and acting as if it still held it.
// leasehold guarantees three things, and its names and docs claim nothing
// more:
//
//  1. The backend never grants two unexpired leases on one key.
//  2. Every grant carries a fencing Token that is greater than every token
//     granted before on that key. A resource that remembers the highest
//     token it has seen and rejects lower ones is protected from a stale
//     holder; this is the only protection against pauses.
//  3. The holder gets a local deadline it can trust: Lock.Context is
//     cancelled at  send time of the last successful acquire/renew
//     + granted TTL × (1 − drift) − margin, measured on the local monotonic
//     clock. Counting from when the request was sent, not when its reply
//     arrived, keeps this true when replies are slow.
//
// # Keys
//
// Keys are paths of segments separated by "/", such as
// "tenant/service/resource". A segment is 1–128 characters from
// [A-Za-z0-9._-] and is not "." or "..". Each Locker and Elector has a
// namespace (default "default", same rules) that prefixes its keys in the
// backend, so several applications or environments can share one backend
// without collisions. A namespace is a naming convention, not access
// control: confine a namespace with the backend's own access control.
package leasehold

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Token is a fencing token: a number that strictly increases for every new
// holder of a key. Pass it to the resource you protect and have the resource
// reject tokens lower than the highest it has seen. In JSON it is a string,
// since JavaScript numbers cannot hold every uint64.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalJSON encodes the token as a JSON string.
func (t Token) MarshalJSON() ([]byte, error) { return []byte(`"` + t.String() + `"`), nil }

// UnmarshalJSON accepts a JSON string (or, leniently, a number).
func (t *Token) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: token %s is not an unsigned decimal", ErrInvalid, b)
	}
	*t = Token(v)
	return nil
}

// Key limits.
const (
	MaxSegmentLen = 128
	MaxPathLen    = 256
)

// ValidatePath checks a key, role or namespace path. field names it in the
// error ("key", "role", "namespace").
func ValidatePath(field, p string) error {
	if p == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	if len(p) > MaxPathLen {
		return fmt.Errorf("%w: %s %.40q… is %d bytes, more than %d", ErrInvalid, field, p, len(p), MaxPathLen)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if err := validSegment(seg); err != nil {
			return fmt.Errorf("%w: %s %q: %s", ErrInvalid, field, p, err)
		}
	}
	return nil
}

func validSegment(s string) error {
	switch {
	case s == "":
		return errors.New("empty segment (leading, trailing or double '/')")
	case s == "." || s == "..":
		return fmt.Errorf("segment %q is not allowed", s)
	case len(s) > MaxSegmentLen:
		return fmt.Errorf("segment is longer than %d", MaxSegmentLen)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("character %q is not in [A-Za-z0-9._-]", r)
		}
	}
	return nil
}

// Backend key layout: <namespace>:<kind>:<path>. Paths and namespaces
// cannot contain ':', so the layout is one-to-one: no namespace/key pair can
// name another pair's lease, and kinds keep lock keys and election roles
// apart.
const (
	kindLock = "lock"
	kindRole = "role"
)

func backendKey(namespace, kind, path string) string {
	return namespace + ":" + kind + ":" + path
}

// LockPrefix returns the backend key prefix under which a namespace's locks
// live, for listing them with backend.Leases.List.
func LockPrefix(namespace string) string { return namespace + ":" + kindLock + ":" }

// LockKey returns the backend key of lock key in namespace.
func LockKey(namespace, key string) string { return backendKey(namespace, kindLock, key) }

// RoleKey returns the backend key of an election role in namespace.
func RoleKey(namespace, role string) string { return backendKey(namespace, kindRole, role) }

// SplitKey undoes the backend key layout: it returns the namespace, kind
// ("lock" or "role") and user path of a backend key, or ok=false.
func SplitKey(bkey string) (namespace, kind, path string, ok bool) {
	namespace, rest, ok1 := strings.Cut(bkey, ":")
	kind, path, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || (kind != kindLock && kind != kindRole) {
		return "", "", "", false
	}
	return namespace, kind, path, true
}
