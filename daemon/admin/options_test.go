package admin_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// Every option refuses a bad argument with ErrConfigInvalid, naming the
// option and the value (a token's secret never).
func TestOptionsValidated(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	sched, err := schedule.New(b)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.NotFoundHandler()
	const secret = "s3cret with space and long enough to pass the length check"
	for _, tc := range []struct {
		opt  admin.Option
		want string
	}{
		{admin.WithAddress("7070"), `WithAddress("7070")`},
		{admin.WithTokens(admin.Token{Secret: secret, Scope: admin.ScopeRead}), "WithTokens: tokens[0].secret: contains white space"},
		{admin.WithTLS("cert.pem", ""), `WithTLS("cert.pem", "")`},
		{admin.WithLogger(nil), "WithLogger(nil)"},
		{admin.WithHandler("", ok), `WithHandler("", `},
		{admin.WithHandler("GET /x", nil), `WithHandler("GET /x", <nil>)`},
		{admin.WithScopedHandler("GET /metrics", ok, "root"), `WithScopedHandler("GET /metrics", …, "root")`},
		{admin.WithMaxConnections(-1), "WithMaxConnections(-1)"},
		{nil, "nil option"},
	} {
		_, err := admin.New(b, sched, tc.opt)
		if !errors.Is(err, admin.ErrConfigInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrConfigInvalid containing %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("New = %v shows a token's secret", err)
		}
	}
}
