package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

func ExampleNew() {
	b := memory.New()
	sched, _ := schedule.New(b, leasehold.WithInstance("web-1"), leasehold.WithNamespace("shop"))
	_ = sched.Register(schedule.Job{Name: "report", Schedule: "0 6 * * *", Func: func(context.Context, schedule.Run) error { return nil }})

	// Loopback without tokens is allowed; any other address needs
	// admin.WithTokens. WithHandler mounts more handlers next to the API.
	srv, err := admin.New(b, sched,
		admin.WithAddress("127.0.0.1:7070"),
		admin.WithHandler("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A real daemon calls srv.Listen and srv.Serve; here a test server.
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	resp, _ := http.Get(hs.URL + "/api/v1/jobs?next=1")
	var jobs struct {
		Namespace string
		Jobs      []admin.Job
	}
	_ = json.NewDecoder(resp.Body).Decode(&jobs)
	resp.Body.Close()
	fmt.Println(jobs.Namespace, jobs.Jobs[0].Name, jobs.Jobs[0].Schedule, jobs.Jobs[0].Paused)

	resp, _ = http.Get(hs.URL + "/healthz")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))
	// Output:
	// shop report 0 6 * * * false
	// ok
}

func ExampleWithTokens() {
	sched, _ := schedule.New(memory.New(), leasehold.WithInstance("web-1"))
	_, err := admin.New(memory.New(), sched, admin.WithAddress("0.0.0.0:7070"))
	fmt.Println(err != nil)
	_, err = admin.New(memory.New(), sched, admin.WithAddress("0.0.0.0:7070"),
		admin.WithTokens(admin.Token{Secret: "a-long-random-secret-for-dashboards", Scope: admin.ScopeRead}))
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

func ExampleIsLoopback() {
	for _, addr := range []string{"127.0.0.1:7070", "localhost:7070", "[::1]:7070", "0.0.0.0:7070", ":7070"} {
		fmt.Println(addr, admin.IsLoopback(addr))
	}
	// Output:
	// 127.0.0.1:7070 true
	// localhost:7070 true
	// [::1]:7070 true
	// 0.0.0.0:7070 false
	// :7070 false
}
