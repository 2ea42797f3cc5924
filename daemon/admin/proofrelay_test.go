package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
)

// TestProofNotRelayed: a listener squatting an address must not pass the
// listener proof by handing the challenge to the real daemon listening
// elsewhere, whether it relays the bytes of the connection or answers
// with a redirect to the daemon (a client following redirects would check
// the proof against the daemon's connection, and then send the token to
// the squatter's address: the daemon's own sibling check used such a
// client).
func TestProofNotRelayed(t *testing.T) {
	conf := fmt.Sprintf(jobsYAML, "a") + fmt.Sprintf("http:\n  tokens:\n    - {scope: admin, token: %q}\n", adminSecret)
	n := startNode(t, memory.New(), "d1", "default", conf)
	daemonAddr := n.d.AdminAddr().String()

	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, n.url+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	relay, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	go func() {
		for {
			c, err := relay.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", daemonAddr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The real daemon proves itself (the check below refuses for a reason).
	if _, err := admin.VerifyListener(ctx, &http.Client{}, n.url, adminSecret); err != nil {
		t.Fatalf("the daemon itself: %v", err)
	}
	for name, base := range map[string]string{
		"redirect to the daemon": redirecting.URL,
		"byte relay":             "http://" + relay.Addr().String(),
	} {
		remote, err := admin.VerifyListener(ctx, &http.Client{}, base, adminSecret)
		if !errors.Is(err, admin.ErrNoProof) {
			t.Errorf("%s: VerifyListener(%s) = %q, %v; want ErrNoProof", name, base, remote, err)
		}
	}
}
