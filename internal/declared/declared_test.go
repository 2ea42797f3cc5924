package declared

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestOfferKeepsLatestReading: a reading begun earlier that finishes later
// does not replace a later one; concurrent offers end with the latest.
func TestOfferKeepsLatestReading(t *testing.T) {
	var l Latest
	if got := l.Load(); got != (backend.Capabilities{}) {
		t.Fatalf("empty Latest loads %+v", got)
	}
	t0 := time.Now()
	newer := backend.Capabilities{Name: "x", DurableFencing: false, ReadAt: t0.Add(time.Second)}
	older := backend.Capabilities{Name: "x", DurableFencing: true, ReadAt: t0}
	if got := l.Offer(newer); got != newer {
		t.Fatalf("first Offer kept %+v", got)
	}
	if got := l.Offer(older); got != newer || l.Load() != newer {
		t.Fatalf("an older reading replaced a newer one: Offer %+v, Load %+v", got, l.Load())
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Offer(backend.Capabilities{Name: "x", ReadAt: t0.Add(time.Duration(i+2) * time.Second)})
		}()
	}
	wg.Wait()
	if got := l.Load().ReadAt; !got.Equal(t0.Add(65 * time.Second)) {
		t.Errorf("after concurrent offers: ReadAt %v, want the latest %v", got, t0.Add(65*time.Second))
	}
}
