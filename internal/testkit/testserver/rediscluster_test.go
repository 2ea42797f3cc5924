package testserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestRedisCluster: six nodes join a Cluster with three primaries and
// three replicas, and a killed primary is replaced by its replica.
func TestRedisCluster(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	primaries := 0
	for _, n := range rc.Nodes {
		role, err := testserver.Role(n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if role == "master" {
			primaries++
		}
	}
	if primaries != 3 {
		t.Fatalf("%d primaries, want 3", primaries)
	}
	rc.Nodes[0].Kill()
	rc.WaitOK(t, 30*time.Second) // the replica took over its slots
	rc.Nodes[0].Start()
	rc.WaitOK(t, 30*time.Second)
	if _, err := testserver.Role(rc.Nodes[0].Addr()); err != nil {
		t.Fatalf("restarted node does not answer: %v", err)
	}
}

// TestRedisSentinel: the set settles, and a killed primary is replaced by
// a replica the Sentinels name.
func TestRedisSentinel(t *testing.T) {
	s := testserver.StartRedisSentinel(t)
	old, err := s.Master()
	if err != nil || old != s.Primary.Addr() {
		t.Fatalf("master %q, %v; want %s", old, err, s.Primary.Addr())
	}
	s.Primary.Kill()
	var m string
	if !eventually.Within(60*time.Second, func() bool {
		if m, err = s.Master(); err != nil || m == old {
			return false
		}
		role, _ := testserver.Role(m)
		return strings.HasPrefix(role, "master")
	}) {
		t.Fatalf("no failover: master %q, %v", m, err)
	}
}
