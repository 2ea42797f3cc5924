package daemon

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
)

// TestSquattedDefaultAddressStopsDaemon (issue 27 item 2): when the
// default admin address is taken by another process and the daemon uses
// a token it generated (usable only through that API), the daemon must
// not run with its API silently off: Run fails naming the address.
func TestSquattedDefaultAddressStopsDaemon(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err := Parse(filepath.Join(t.TempDir(), "l.yaml"), []byte(oneJob))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenNamed() {
		t.Fatal("the config names no http.listen, but ListenNamed")
	}
	cfg.HTTP.Listen = taken.Addr().String() // the default, taken by a squatter
	d, err := New(cfg, memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if path, _, _ := d.AdminToken(); path == "" {
		t.Fatal("no generated admin token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Fatalf("Run with the default address taken = %v, want an error naming %s", err, taken.Addr())
		}
	case <-d.Ready():
		cancel()
		<-done
		t.Fatalf("the daemon ran with its admin API off (address %s taken) although its generated token is usable only there", taken.Addr())
	}
}

// TestSiblingOnDefaultAddressAllowed: several daemons on one database and
// host share the generated token; the one that finds the default address
// served by another daemon proving it holds that token runs without its
// own API, as before (only a listener that cannot prove it stops it).
func TestSiblingOnDefaultAddressAllowed(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := func(name string) (*Daemon, context.CancelFunc, chan error) {
		cfg, err := Parse(filepath.Join(dir, "l.yaml"), []byte(oneJob))
		if err != nil {
			t.Fatal(err)
		}
		cfg.HTTP.Listen = addr // the default, not named
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
			cancel()
			t.Fatalf("%s: Run = %v", name, err)
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("%s: not ready within 30 s", name)
		}
		return d, cancel, done
	}
	d1, stop1, done1 := start("first daemon")
	defer func() { stop1(); <-done1 }()
	if d1.AdminAddr() == nil {
		t.Fatal("the first daemon does not serve its API")
	}
	d2, stop2, done2 := start("second daemon, same token file")
	defer func() { stop2(); <-done2 }()
	if d2.AdminAddr() != nil {
		t.Fatalf("the second daemon serves on %v; the address was the first's", d2.AdminAddr())
	}
}

// TestSquatterRedirectingToSiblingStopsDaemon: a squatter on the default
// address that answers the proof with a redirect to a sibling daemon
// (same token file, listening elsewhere) proves nothing about itself: the
// daemon stops as for any squatter, instead of leaving the default
// address, where clients send the token, to it.
func TestSquatterRedirectingToSiblingStopsDaemon(t *testing.T) {
	dir := t.TempDir()
	parse := func(listen string) *Config {
		cfg, err := Parse(filepath.Join(dir, "l.yaml"), []byte(oneJob))
		if err != nil {
			t.Fatal(err)
		}
		cfg.HTTP.Listen = listen // the default, not named
		return cfg
	}
	sibling, err := New(parse("127.0.0.1:0"), memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	siblingDone := make(chan error, 1)
	sctx, stopSibling := context.WithCancel(ctx)
	go func() { siblingDone <- sibling.Run(sctx) }()
	defer func() { stopSibling(); <-siblingDone }()
	select {
	case <-sibling.Ready():
	case err := <-siblingDone:
		t.Fatalf("sibling: Run = %v", err)
	}
	squatter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+sibling.AdminAddr().String()+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer squatter.Close()
	d, err := New(parse(squatter.Listener.Addr().String()), memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), squatter.Listener.Addr().String()) {
			t.Fatalf("Run with a redirecting squatter on the default address = %v, want an error naming it", err)
		}
	case <-d.Ready():
		cancel()
		<-done
		t.Fatalf("the daemon ran with its API off, leaving the default address to a squatter that redirected the proof to its sibling")
	}
}
