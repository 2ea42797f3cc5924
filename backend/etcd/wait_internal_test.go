package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestWaitCompacted: a waiter whose watch starts at a revision etcd has
// compacted away gets ErrCompacted from the watch; Wait must then wake it
// (the delete it waits for may be in the compacted history), not hang.
// And the ordinary path: a Wait on a held key wakes on Release.
func TestWaitCompacted(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := OpenConfig(ctx, Config{Endpoints: []string{srv.Addr()}, Prefix: "wc/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := int64(g.Token) // the revision the key was created at
	for i := range 5 {
		if _, err := b.c.Put(ctx, "wc/other", string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := b.c.Get(ctx, "wc/other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.waitDelete(ctx, b.LockKey("k"), old+1):
	case <-time.After(10 * time.Second):
		t.Fatal("a watch from a compacted revision did not wake the waiter")
	}

	ch, err := b.Wait(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("Wait on a held key returned at once")
	default:
	}
	if err := b.Release(ctx, "k", a, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake on Release")
	}
}
