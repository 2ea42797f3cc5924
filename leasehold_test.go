package leasehold_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
)

func TestValidatePath(t *testing.T) {
	good := []string{"a", "tenant/service/resource", "A-b_c.d/0", strings.Repeat("x", 128)}
	for _, p := range good {
		if err := leasehold.ValidatePath("key", p); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                         "empty",
		"/a":                       "empty segment",
		"a/":                       "empty segment",
		"a//b":                     "empty segment",
		"a/./b":                    `segment "."`,
		"a/../b":                   `segment ".."`,
		"a b":                      `character ' '`,
		"a\x00b":                   `character '\x00'`,
		"ключ":                     "character",
		strings.Repeat("x", 129):   "longer than 128",
		strings.Repeat("ab/", 100): "bytes, more than 256",
	}
	for p, want := range bad {
		err := leasehold.ValidatePath("key", p)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "key") {
			t.Errorf("ValidatePath(%.30q) = %v, want ErrInvalid naming the key and %q", p, err, want)
		}
	}
}

func TestSplitKey(t *testing.T) {
	ns, kind, path, ok := leasehold.SplitKey(leasehold.LockPrefix("prod/billing") + "reports/daily")
	if !ok || ns != "prod/billing" || kind != "lock" || path != "reports/daily" {
		t.Fatalf("SplitKey = %q %q %q %v", ns, kind, path, ok)
	}
	for _, bad := range []string{"no-kind-here", "ns:other:k", "ns/lock/k"} {
		if _, _, _, ok := leasehold.SplitKey(bad); ok {
			t.Fatalf("SplitKey accepted %q", bad)
		}
	}
	// One-to-one: namespace "a" + key "lock/k" and namespace "a/lock" + key
	// "k" are different leases.
	if leasehold.LockKey("a", "lock/k") == leasehold.LockKey("a/lock", "k") {
		t.Fatal("two namespace/key pairs share a backend key")
	}
}

func TestTokenJSON(t *testing.T) {
	tok := leasehold.Token(1<<63 + 5)
	b, err := json.Marshal(struct{ T leasehold.Token }{tok})
	if err != nil || string(b) != `{"T":"9223372036854775813"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back struct{ T leasehold.Token }
	if err := json.Unmarshal(b, &back); err != nil || back.T != tok {
		t.Fatalf("Unmarshal = %v, %v", back.T, err)
	}
	if err := json.Unmarshal([]byte(`{"T":"-1"}`), &back); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("Unmarshal of -1 = %v, want ErrInvalid", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	b := memory.New()
	cases := []struct {
		name string
		opts []leasehold.Option
		want string
	}{
		{"zero ttl", []leasehold.Option{leasehold.WithTTL(0)}, "WithTTL(0s)"},
		{"negative ttl", []leasehold.Option{leasehold.WithTTL(-time.Second)}, "WithTTL(-1s)"},
		{"deadline not below ttl", []leasehold.Option{leasehold.WithTTL(time.Second), leasehold.WithRenewDeadline(time.Second)}, "renew deadline 1s must be shorter than ttl 1s"},
		{"period not below deadline", []leasehold.Option{leasehold.WithTTL(3 * time.Second), leasehold.WithRenewDeadline(time.Second), leasehold.WithRenewEvery(time.Second)}, "renew every 1s must be shorter than renew deadline 1s"},
		{"negative period", []leasehold.Option{leasehold.WithRenewEvery(-time.Second)}, "WithRenewEvery(-1s)"},
		{"negative deadline", []leasehold.Option{leasehold.WithRenewDeadline(-time.Second)}, "WithRenewDeadline(-1s)"},
		{"drift", []leasehold.Option{leasehold.WithDrift(0.7)}, "WithDrift(0.7)"},
		{"negative drift", []leasehold.Option{leasehold.WithDrift(-0.1)}, "WithDrift(-0.1)"},
		{"drift NaN", []leasehold.Option{leasehold.WithDrift(math.NaN())}, "WithDrift(NaN)"},
		{"negative margin", []leasehold.Option{leasehold.WithMargin(-time.Second)}, "WithMargin(-1s)"},
		{"margin eats the lease", []leasehold.Option{leasehold.WithTTL(time.Second), leasehold.WithMargin(900 * time.Millisecond)}, "holder's deadline"},
		{"namespace", []leasehold.Option{leasehold.WithNamespace("a//b")}, `WithNamespace("a//b")`},
		{"empty namespace", []leasehold.Option{leasehold.WithNamespace("")}, `WithNamespace("")`},
		{"instance", []leasehold.Option{leasehold.WithInstance("")}, `WithInstance("")`},
		{"long instance", []leasehold.Option{leasehold.WithInstance(strings.Repeat("i", 129))}, `WithInstance("iii`},
		{"backoff", []leasehold.Option{leasehold.WithBackoff(time.Second, time.Millisecond)}, "WithBackoff(1s, 1ms)"},
		{"zero backoff", []leasehold.Option{leasehold.WithBackoff(0, time.Second)}, "WithBackoff(0s, 1s)"},
		{"logger", []leasehold.Option{leasehold.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil option", []leasehold.Option{leasehold.WithInstance("ok"), nil}, "option 1 is nil"},
		{"first bad option wins", []leasehold.Option{leasehold.WithInstance("ok"), leasehold.WithTTL(0), leasehold.WithLogger(nil)}, "WithTTL(0s)"},
		{"below backend minimum", []leasehold.Option{leasehold.WithTTL(500 * time.Microsecond), leasehold.WithMargin(time.Nanosecond)}, "below backend memory's minimum"},
	}
	for _, c := range cases {
		_, err := leasehold.NewLocker(b, c.opts...)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewLocker = %v, want ErrInvalid containing %q", c.name, err, c.want)
		}
	}
	if _, err := leasehold.NewLocker(b); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if _, err := leasehold.NewElector(b, "bad role", leasehold.Callbacks{}); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "role") {
		t.Fatalf("NewElector with a bad role = %v", err)
	}
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"a", "tenant/service/resource", "a//b", "../x", "ключ", "a:b", strings.Repeat("x/", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := leasehold.ValidatePath("key", p)
		if err != nil {
			if !errors.Is(err, leasehold.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Accepted paths are safe in every backend key layout.
		if strings.ContainsAny(p, ":\x00 \n") || len(p) > leasehold.MaxPathLen || strings.HasPrefix(p, "/") || strings.Contains(p, "//") {
			t.Fatalf("accepted %q", p)
		}
		ns, kind, path, ok := leasehold.SplitKey(leasehold.LockKey("ns", p))
		if !ok || ns != "ns" || kind != "lock" || path != p {
			t.Fatalf("SplitKey(LockKey(ns, %q)) = %q %q %q %v", p, ns, kind, path, ok)
		}
	})
}
