package daemon

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

const oneJob = `
grace: 1s
jobs:
  - name: tick
    schedule: "@every 1h"
    command: {argv: [/bin/true]}
`

// TestAdminListen: "off" serves nothing; an explicitly configured address
// that is taken stops the daemon with an error naming it.
func TestAdminListen(t *testing.T) {
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run = %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready within 20 s")
	}
	if a := d.AdminAddr(); a != nil {
		t.Fatalf("http.listen off, but the API listens on %v", a)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err = Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \""+taken.Addr().String()+"\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err = New(cfg, memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := d.Run(rctx); err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Fatalf("Run with a taken address = %v, want an error naming %s", err, taken.Addr())
	}
}

// TestNewRefusesBackendWithoutLedger: a daemon runs jobs, so it needs a
// backend that keeps a run ledger, and names the one that does not.
func TestNewRefusesBackendWithoutLedger(t *testing.T) {
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := memory.New()
	defer m.Close()
	_, err = New(cfg, struct{ backend.Leases }{m}, nil)
	if !errors.Is(err, backend.ErrNoLedger) || !strings.Contains(err.Error(), `"memory"`) {
		t.Fatalf("New = %v, want an error wrapping backend.ErrNoLedger naming the backend", err)
	}
}
