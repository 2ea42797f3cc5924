package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestZooKeeper: the server answers ruok, and again after Restart on the
// same port and data directory.
func TestZooKeeper(t *testing.T) {
	s := ZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := zkRuok(ctx, s.Addr()); err != nil {
		t.Fatalf("ruok: %v", err)
	}
	port := s.Port()
	s.Restart()
	if err := zkRuok(ctx, s.Addr()); err != nil {
		t.Fatalf("ruok after restart: %v", err)
	}
	if s.Port() != port {
		t.Fatalf("port changed from %d to %d", port, s.Port())
	}
}

// TestZooKeeperEnsemble: three members serve with one leader; a member cut
// off from both others stops serving, and serves again once restored.
func TestZooKeeperEnsemble(t *testing.T) {
	e := ZooKeeperEnsemble3(t)
	leader := e.WaitServing(t, 10*time.Second)
	if leader < 0 {
		t.Fatal("no member reports itself the leader")
	}
	f := (leader + 1) % 3
	e.Cut(f, leader, true)
	e.Cut(f, (leader+2)%3, true)
	if !eventually.Within(30*time.Second, func() bool {
		_, err := ZooKeeperMode(e.Members[f].Addr())
		return err != nil
	}) {
		t.Fatal("a member cut off from the others still serves after 30s")
	}
	e.Cut(f, leader, false)
	e.Cut(f, (leader+2)%3, false)
	e.WaitServing(t, 30*time.Second)
}
