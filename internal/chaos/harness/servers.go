package harness

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/internal/testserver"
)

// Kinds are the backend names the harness can start a server for (or, for
// sqlite, create a database file for).
func Kinds() []string { return []string{"etcd", "mysql", "postgres", "redis", "sqlite", "zookeeper"} }

// backendServer is the backend under test: its URL and, when the harness
// started it, the server it can restart.
type backendServer struct {
	url    string
	server *testserver.Server // nil: not ours (or no server: SQLite)
	addr   string             // host:port clients dial; "" for SQLite
}

// startBackend resolves spec: a kind name starts a private server (or a
// SQLite file in dir), anything else is a URL of an existing backend.
func startBackend(t testserver.TB, spec, dir string) (backendServer, error) {
	switch spec {
	case "sqlite":
		return backendServer{url: "sqlite://" + filepath.Join(dir, "chaos.db")}, nil
	case "redis":
		s := testserver.Redis(t)
		return backendServer{url: "redis://" + s.Addr() + "/0", server: s, addr: s.Addr()}, nil
	case "postgres":
		s := testserver.Postgres(t)
		return backendServer{url: testserver.PostgresServerURL(s), server: s, addr: s.Addr()}, nil
	case "mysql", "mariadb":
		s := testserver.MariaDB(t)
		return backendServer{url: testserver.MariaDBURL(s), server: s, addr: s.Addr()}, nil
	case "etcd":
		s := testserver.Etcd(t)
		return backendServer{url: "etcd://" + s.Addr() + "/chaos", server: s, addr: s.Addr()}, nil
	case "zookeeper", "zk":
		s := testserver.ZooKeeper(t)
		return backendServer{url: "zk://" + s.Addr() + "/chaos?session_timeout=2s", server: s, addr: s.Addr()}, nil
	}
	u, err := url.Parse(spec)
	if err != nil || u.Scheme == "" {
		return backendServer{}, fmt.Errorf("backend %q: neither a kind (%s) nor a URL", spec, strings.Join(Kinds(), ", "))
	}
	if u.Scheme == "sqlite" {
		return backendServer{url: spec}, nil
	}
	if strings.Contains(u.Host, ",") {
		return backendServer{}, fmt.Errorf("backend %q: the harness proxies one endpoint; give a single host", u.Redacted())
	}
	addr := u.Host
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		addr = addr[i+1:]
	}
	return backendServer{url: spec, addr: addr}, nil
}

// viaProxy returns rawURL with its host:port replaced by proxyAddr.
func viaProxy(rawURL, proxyAddr string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.Host = proxyAddr
	return u.String(), nil
}

// runTB is the testserver.TB of the command line (internal/testserver is
// written for tests): Fatalf and Skipf panic with a tbAbort that Run recovers, Cleanup
// functions run (last first) when the run ends.
type runTB struct {
	mu       sync.Mutex
	dir      string
	n        int
	cleanups []func()
}

var _ testserver.TB = (*runTB)(nil)

type tbAbort struct{ msg string }

func newRunTB(dir string) *runTB { return &runTB{dir: dir} }

func (t *runTB) Helper()                   {}
func (t *runTB) Fatalf(f string, a ...any) { panic(tbAbort{fmt.Sprintf(f, a...)}) }
func (t *runTB) Fatal(a ...any)            { panic(tbAbort{fmt.Sprint(a...)}) }
func (t *runTB) Errorf(f string, a ...any) { panic(tbAbort{fmt.Sprintf(f, a...)}) }
func (t *runTB) Skipf(f string, a ...any)  { panic(tbAbort{"cannot test: " + fmt.Sprintf(f, a...)}) }
func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *runTB) TempDir() string {
	t.mu.Lock()
	t.n++
	d := filepath.Join(t.dir, fmt.Sprintf("server%d", t.n))
	t.mu.Unlock()
	if err := os.MkdirAll(d, 0o755); err != nil {
		panic(tbAbort{err.Error()})
	}
	return d
}

func (t *runTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// guard runs f, turning a runTB abort into an error.
func guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			a, ok := p.(tbAbort)
			if !ok {
				panic(p)
			}
			err = errors.New(a.msg)
		}
	}()
	return f()
}

// Server is a backend server (or SQLite file) started for a measurement
// outside tests, such as "leasehold bench matrix".
type Server struct {
	URL string
	bs  backendServer
}

// StartServer starts a private server of kind (see Kinds) with its files
// under dir. stop stops it and removes nothing.
func StartServer(kind, dir string) (s *Server, stop func(), err error) {
	rt := newRunTB(dir)
	err = guard(func() error {
		bs, err := startBackend(rt, kind, dir)
		s = &Server{URL: bs.url, bs: bs}
		return err
	})
	if err != nil {
		rt.cleanup()
		return nil, func() {}, err
	}
	return s, rt.cleanup, nil
}

// Restartable reports whether Crash can restart the server.
func (s *Server) Restartable() bool { return s.bs.server != nil }

// Crash kills the server with SIGKILL and starts it again on the same port
// and data, returning when it answers again.
func (s *Server) Crash() error {
	if s.bs.server == nil {
		return fmt.Errorf("%w: no server of ours to restart", errNoServer)
	}
	return guard(func() error { s.bs.server.Kill(); s.bs.server.Start(); return nil })
}

// Kill kills the server with SIGKILL; Start starts it again.
func (s *Server) Kill() error {
	if s.bs.server == nil {
		return errNoServer
	}
	return guard(func() error { s.bs.server.Kill(); return nil })
}

// Start starts a killed server again, returning when it answers.
func (s *Server) Start() error {
	if s.bs.server == nil {
		return errNoServer
	}
	return guard(func() error { s.bs.server.Start(); return nil })
}

var errNoServer = errors.New("harness: no server to restart")
