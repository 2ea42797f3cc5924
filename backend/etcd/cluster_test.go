package etcd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// checker records every entry into the critical section and flags two
// holders whose deadlines overlap, or a token that goes backwards.
type checker struct {
	mu     sync.Mutex
	inside map[*leasehold.Lock]bool
	last   leasehold.Token
	grants int
	errs   []string
}

// enter admits l if its deadline has not passed (what a careful holder
// checks before acting). It reports whether l may act.
func (c *checker) enter(l *leasehold.Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !now.Before(l.Deadline()) {
		return false
	}
	for o := range c.inside {
		if now.Before(o.Deadline()) {
			c.errs = append(c.errs, "two holders: token "+o.Token().String()+" still within its deadline when "+l.Token().String()+" entered")
		}
	}
	if l.Token() <= c.last {
		c.errs = append(c.errs, "token "+l.Token().String()+" after "+c.last.String())
	}
	c.last = l.Token()
	c.inside[l] = true
	c.grants++
	return true
}

func (c *checker) exit(l *leasehold.Lock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inside, l)
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grants
}

// leader returns the index of the member that is the Raft leader.
func leader(t *testing.T, cl *testserver.EtcdCluster) int {
	t.Helper()
	found := -1
	if eventually.Within(30*time.Second, func() bool {
		for i, m := range cl.Members {
			if m.PID() == 0 {
				continue
			}
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Addr()}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Status(ctx, m.Addr())
			cancel()
			c.Close()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				found = i
				return true
			}
		}
		return false
	}) {
		return found
	}
	t.Fatalf("no etcd leader within 30s")
	return -1
}

// TestClusterLeaderKill runs workers contending for one lock on a 3-member
// cluster, kills the leader with SIGKILL twice (restarting it in between)
// while leases are held and acquisitions are in flight, and checks that no
// two holders were within their deadlines at once and that tokens only
// grew; and that the lock kept being granted after each kill.
func TestClusterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("short: starts a 3-member cluster")
	}
	cl := testserver.EtcdCluster3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chk := &checker{inside: map[*leasehold.Lock]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		b := open(t, cl.Endpoints(), "cluster/")
		lk := locker(t, b, "w"+string(rune('0'+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := lk.Acquire(actx, "svc/cluster")
				acancel()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Logf("worker %d: acquire: %v", w, err)
					}
					continue
				}
				if chk.enter(l) {
					time.Sleep(5 * time.Millisecond) // the work
					chk.exit(l)
				}
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				_ = l.Release(rctx)
				rcancel()
			}
		}()
	}
	waitGrants := func(n int, what string) {
		t.Helper()
		if !eventually.Within(60*time.Second, func() bool { return chk.count() >= n }) {
			t.Fatalf("%s: only %d grants, want %d", what, chk.count(), n)
		}
	}
	waitGrants(20, "before any kill")
	for round := range 2 {
		i := leader(t, cl)
		before := chk.count()
		t.Logf("round %d: killing leader m%d after %d grants", round, i, before)
		cl.Members[i].Kill()
		waitGrants(before+20, "after killing the leader")
		cl.Members[i].Start()
		cl.WaitHealthy(t, 60*time.Second)
	}
	close(stop)
	wg.Wait()
	chk.mu.Lock()
	defer chk.mu.Unlock()
	for _, e := range chk.errs {
		t.Error(e)
	}
	t.Logf("%d grants, last token %d", chk.grants, chk.last)
}
