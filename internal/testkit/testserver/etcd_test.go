package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestEtcd: a single member answers /health, and again after Kill + Start
// and Restart on the same port and data directory.
func TestEtcd(t *testing.T) {
	s := Etcd(t)
	healthy := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if !eventually.Within(10*time.Second, func() bool {
			err = etcdHealthy(ctx, s.Addr())
			return err == nil
		}) {
			t.Fatalf("%s: etcd at %s not healthy: %v", what, s.Addr(), err)
		}
	}
	healthy("start")
	port := s.Port()
	s.Kill()
	if s.PID() != 0 {
		t.Fatalf("PID %d after Kill", s.PID())
	}
	s.Start()
	healthy("start after kill")
	s.Restart()
	healthy("restart")
	if s.Port() != port {
		t.Fatalf("port changed from %d to %d", port, s.Port())
	}
}

// TestEtcdCluster3: three members come up healthy, and a killed member
// rejoins after Start.
func TestEtcdCluster3(t *testing.T) {
	if testing.Short() {
		t.Skip("short: starts 3 etcd processes")
	}
	c := EtcdCluster3(t)
	if n := len(c.Endpoints()); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}
	c.Members[1].Kill()
	c.WaitHealthy(t, 30*time.Second) // the other two keep a quorum
	c.Members[1].Start()
	c.WaitHealthy(t, 60*time.Second)
}
