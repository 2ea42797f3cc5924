package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// FuzzParseCursor: a cursor either parses into what cursorOf would produce
// again, or is rejected; it never panics.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"1700000000000~job", "0~a", "~", "-1~x", "12~a~b", "abc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, c string) {
		at, job, err := parseCursor(c)
		if err != nil {
			return
		}
		again := strconv.FormatInt(at.UnixMilli(), 10) + "~" + job
		at2, job2, err := parseCursor(again)
		if err != nil || !at2.Equal(at) || job2 != job || job == "" {
			t.Fatalf("parseCursor(%q) = %v, %q; its re-encoding %q parses to %v, %q, %v", c, at, job, again, at2, job2, err)
		}
	})
}

// FuzzRunsQuery: any query string on /api/v1/runs is answered 200, 400 or
// 404 with a JSON body — never a panic or a 5xx.
func FuzzRunsQuery(f *testing.F) {
	b := memory.New()
	sched, err := schedule.New(b, schedule.WithInstance("x"))
	if err != nil {
		f.Fatal(err)
	}
	_ = sched.Register(schedule.Job{Name: "j", Schedule: "@daily", Func: func(_ context.Context, _ schedule.Run) error { return nil }})
	s, err := New(b, sched)
	if err != nil {
		f.Fatal(err)
	}
	for _, q := range []string{"job=j&limit=5", "cursor=1~j", "since=2026-01-01T00:00:00Z&state=failed", "limit=-1", "job=j!trigger!k", "x=%zz"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		u := &url.URL{Path: "/api/v1/runs", RawQuery: q}
		req := httptest.NewRequest("GET", "/", nil)
		req.URL, req.Host = u, "127.0.0.1:7070"
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("GET /api/v1/runs?%s = %d %s", q, rec.Code, rec.Body)
		}
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("GET /api/v1/runs?%s: content type %q", q, rec.Header().Get("Content-Type"))
		}
	})
}
