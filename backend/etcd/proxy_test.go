package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestProxyDelayAndCut puts a TCP proxy between the holder and etcd and,
// in two cases, delays every reply by 0.8×TTL (requests are applied at
// once) or drops all traffic. Either way the holder's context must end
// while etcd still holds its lease (the deadline counts from send times),
// and after the next holder got a greater token, a write the old holder
// attempts through the fenced helper must be rejected.
func TestProxyDelayAndCut(t *testing.T) {
	srv := testserver.Etcd(t)
	for _, mode := range []string{"delay", "cut"} {
		t.Run(mode, func(t *testing.T) {
			p, err := chaos.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			direct := open(t, []string{srv.Addr()})
			slow := open(t, []string{p.Addr()}, direct.Prefix())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := "job/proxy-" + mode
			bkey := "default:lock:" + key
			l, err := locker(t, slow, "old").TryAcquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if mode == "delay" {
				p.SetDelay(faultTTL * 8 / 10)
			} else {
				p.SetDrop(true)
			}
			select {
			case <-l.Done():
			case <-time.After(20 * faultTTL):
				t.Fatalf("holder's context alive after %v with replies %sed", 20*faultTTL, mode)
			}
			// The holder gave up; etcd must still hold its lease (or have
			// just expired it): the holder never outlives the server's lease.
			if got, err := direct.Get(ctx, bkey); err == nil && got.Token != uint64(l.Token()) {
				t.Fatalf("another holder (token %d) while the old one's context was alive", got.Token)
			}
			next, err := locker(t, direct, "next").Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.Token() <= l.Token() {
				t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
			}
			if mode == "cut" {
				p.SetDrop(false)
				p.CloseConns() // the dropped bytes broke the HTTP/2 stream
			}
			// After the cut the client reconnects; a transport error is no
			// answer, so retry until etcd answers.
			eventually.Within(20*time.Second, func() bool {
				err = slow.FencedPut(ctx, bkey, uint64(l.Token()), direct.Prefix()+"sink", "late")
				return err == nil || errors.Is(err, backend.ErrLeaseLost)
			})
			if !errors.Is(err, backend.ErrLeaseLost) {
				t.Fatalf("late fenced write by the old holder: got %v, want ErrLeaseLost", err)
			}
		})
	}
}
