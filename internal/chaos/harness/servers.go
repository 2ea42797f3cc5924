package harness

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// serverKind is how the harness brings up one backend of backend/open's
// table: a private server (or a SQLite file) and a URL of it.
type serverKind struct {
	name    string   // the backend's name in backend/open
	aliases []string // other names the command line accepts
	// chaos: chaos runs and the matrix can use it (one endpoint to proxy,
	// one server to kill and restart, several processes to share it).
	chaos bool
	start func(t testserver.TB, dir string) backendServer
}

// starters is how to start each backend of backend/open.Backends, by its
// name; the name and aliases fields are filled in by serverKinds. Adding a
// backend adds its row here (CheckTable, which a test runs, fails until it
// does).
var starters = map[string]serverKind{
	"memory": {start: func(testserver.TB, string) backendServer { return backendServer{url: "memory://"} }},
	"sqlite": {chaos: true, start: func(_ testserver.TB, dir string) backendServer {
		return backendServer{url: "sqlite://" + filepath.Join(dir, "chaos.db")}
	}},
	"postgres": {chaos: true, start: func(t testserver.TB, _ string) backendServer {
		s := testserver.Postgres(t)
		return backendServer{url: testserver.PostgresServerURL(s), server: s, addr: s.Addr()}
	}},
	"mysql": {aliases: []string{"mariadb"}, chaos: true, start: func(t testserver.TB, _ string) backendServer {
		s := testserver.MariaDB(t)
		return backendServer{url: testserver.MariaDBURL(s), server: s, addr: s.Addr()}
	}},
	"redis": {chaos: true, start: func(t testserver.TB, _ string) backendServer {
		s := testserver.Redis(t)
		return backendServer{url: "redis://" + s.Addr() + "/0", server: s, addr: s.Addr()}
	}},
	"redlock": {start: func(t testserver.TB, _ string) backendServer {
		var hosts []string
		for range 3 {
			hosts = append(hosts, testserver.Redis(t).Addr())
		}
		return backendServer{url: "redlock://" + strings.Join(hosts, ",") + "/0"}
	}},
	"etcd": {chaos: true, start: func(t testserver.TB, _ string) backendServer {
		s := testserver.Etcd(t)
		return backendServer{url: "etcd://" + s.Addr() + "/chaos", server: s, addr: s.Addr()}
	}},
	"zookeeper": {aliases: []string{"zk"}, chaos: true, start: func(t testserver.TB, _ string) backendServer {
		s := testserver.ZooKeeper(t)
		return backendServer{url: "zk://" + s.Addr() + "/chaos?session_timeout=2s", server: s, addr: s.Addr()}
	}},
}

// serverKinds is the harness's table: one row per backend of
// backend/open.Backends that has a starter, in that table's order.
func serverKinds() []serverKind {
	var ks []serverKind
	for _, d := range open.Backends() {
		if k, ok := starters[d.Name]; ok {
			k.name = d.Name
			ks = append(ks, k)
		}
	}
	return ks
}

// CheckTable reports a backend of backend/open's table that has no starter
// here, or a starter named after no backend of that table.
func CheckTable() error {
	var errs []error
	names := map[string]bool{}
	for _, d := range open.Backends() {
		names[d.Name] = true
		if _, ok := starters[d.Name]; !ok {
			errs = append(errs, fmt.Errorf("backend %q of backend/open's table has no starter in internal/chaos/harness (servers.go)", d.Name))
		}
	}
	for name := range starters {
		if !names[name] {
			errs = append(errs, fmt.Errorf("the harness has a starter for %q, which backend/open's table does not have", name))
		}
	}
	return errors.Join(errs...)
}

// kindNamed returns the row called name (or one of its aliases).
func kindNamed(name string) (serverKind, bool) {
	for _, k := range serverKinds() {
		if k.name == name || slices.Contains(k.aliases, name) {
			return k, true
		}
	}
	return serverKind{}, false
}

// Kinds are the backend names chaos runs and the matrix can start a server
// for (or, for sqlite, create a database file for), sorted.
func Kinds() []string {
	var ks []string
	for _, k := range serverKinds() {
		if k.chaos {
			ks = append(ks, k.name)
		}
	}
	slices.Sort(ks)
	return ks
}

// StartURL starts a private server for the backend called name (any row of
// the table, chaos or not) for test t, with its files under dir, and
// returns a URL of it. The server stops when t ends.
func StartURL(t testserver.TB, name, dir string) (string, error) {
	k, ok := kindNamed(name)
	if !ok {
		return "", fmt.Errorf("backend %q: no server kind (known: %s)", name, strings.Join(AllKinds(), ", "))
	}
	return k.start(t, dir).url, nil
}

// AllKinds names every row of the harness's table, chaos or not, in
// backend/open's order.
func AllKinds() []string {
	var ks []string
	for _, k := range serverKinds() {
		ks = append(ks, k.name)
	}
	return ks
}

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
	if k, ok := kindNamed(spec); ok {
		if !k.chaos {
			return backendServer{}, fmt.Errorf("backend %q: chaos runs need one server to proxy and restart, shared by processes (kinds: %s)", spec, strings.Join(Kinds(), ", "))
		}
		return k.start(t, dir), nil
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

// runTB is the testserver.TB of the command line (internal/testkit/testserver
// is written for tests): Fatalf and Skipf panic with a tbAbort that Run
// recovers, Cleanup functions run (last first) when the run ends.
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
// outside tests, such as "leasehold-lab bench matrix".
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
