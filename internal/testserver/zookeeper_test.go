package testserver

import (
	"context"
	"testing"
	"time"
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
