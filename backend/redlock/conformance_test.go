package redlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/internal/chaos"
)

func TestConformance(t *testing.T) {
	nodes := servers(t, 5)
	conformance.Run(t, conformance.Harness{
		New: func(t testing.TB) backend.Leases {
			p := fmt.Sprintf("t%d:", prefixes.Add(1))
			// A 1 s node timeout: 64 goroutines contending on 5 nodes
			// of a loaded 2-core machine otherwise time out and fail
			// with errors rather than ErrHeld.
			return openAt(t, strings.Join(addrsOf(nodes), ","), p)
		},
		Want: backend.Capabilities{
			Name: "redlock", ServerClock: true, PushEvents: true, MultiProcess: true,
			MinTTL: redlock.MinTTL, TTLGranularity: time.Millisecond,
		},
		UnsafeFencing: restartedEmptyNode,
		// A proxy per node, all five under one rule set.
		Wire: &conformance.Wire{
			Framer: chaos.RESP,
			Open: func(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
				var addrs []string
				for _, a := range addrsOf(nodes) {
					addrs = append(addrs, wrap(a))
				}
				p := fmt.Sprintf("t%d:", prefixes.Add(1))
				return newRedlock(t, addrs, redlock.WithPrefix(p), redlock.WithNodeTimeout(time.Second)),
					newRedlock(t, addrs, redlock.WithPrefix(p), redlock.WithNodeTimeout(time.Second))
			},
		},
		// Helper processes reach the same 5 nodes; the proxied holder
		// reaches each through a proxy of its own.
		Process: func(t testing.TB) faultkit.Kit {
			return faultkit.Kit{Open: openAt, Addr: strings.Join(addrsOf(nodes), ","), NS: fmt.Sprintf("t%d:", prefixes.Add(1))}
		},
	})
}
