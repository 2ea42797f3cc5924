package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// journal is a real server seen as an append-only log: append writes mark
// as the log's next entry over a connection of its own to addr (the
// proxy), entries reads the log over a direct connection.
type journal interface {
	append(ctx context.Context, addr, mark string) error
	entries(ctx context.Context) ([]string, error)
}

// server is one protocol's real server and the framer for it.
type server struct {
	name   string
	addr   string
	framer func() chaos.Framer
	j      journal
}

// TestFaultsOnRealServers runs every rule action against each real server
// through a proxy framing its protocol: the framer must cut the real bytes
// without error and the rules must find the request that names a mark.
func TestFaultsOnRealServers(t *testing.T) {
	for _, open := range []func(t *testing.T) server{redisServer, postgresServer, mysqlServer, zookeeperServer, etcdServer} {
		srv := open(t)
		t.Run(srv.name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				fn   func(t *testing.T, srv server)
			}{
				{"Frames", checkFrames},
				{"Delay", checkDelay},
				{"HoldReorders", checkHold},
				{"DropReplyAfterApply", checkDropReply},
				{"CutMidRequest", checkCut},
				{"BlackHole", checkBlackHole},
			} {
				t.Run(c.name, func(t *testing.T) { c.fn(t, srv) })
			}
		})
	}
}

// proxy starts a proxy to srv framing its protocol, failing the test at
// the end if the framer met bytes it could not frame. The recorded frames
// are written as fuzz seeds when CHAOS_WRITE_SEEDS=1.
func proxy(t *testing.T, srv server) *chaos.Proxy {
	t.Helper()
	rec := &recording{newFramer: srv.framer}
	p, err := chaos.New(srv.addr, chaos.WithFramer(rec.framer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if err := p.FramingError(); err != nil {
			t.Errorf("framing the real %s bytes: %v", srv.name, err)
		}
		if os.Getenv("CHAOS_WRITE_SEEDS") == "1" && strings.HasSuffix(t.Name(), "/Frames") {
			rec.writeSeeds(t, srv.name)
		}
	})
	return p
}

func mark(t *testing.T) string { return "mark-" + backend.NewNonce().String()[:12] }

func has(t *testing.T, srv server, m string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	es, err := srv.j.entries(ctx)
	if err != nil {
		t.Fatalf("reading the %s log: %v", srv.name, err)
	}
	return slices.Contains(es, m)
}

func appendCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func checkFrames(t *testing.T, srv server) {
	p := proxy(t, srv)
	m := mark(t)
	r := p.Rules().Add(chaos.Contains([]byte(m)), chaos.Delay(0), 1)
	ctx, cancel := appendCtx(30 * time.Second)
	defer cancel()
	if err := srv.j.append(ctx, p.Addr(), m); err != nil {
		t.Fatalf("append through the proxy: %v", err)
	}
	select {
	case <-r.Fired():
	default:
		t.Fatalf("no framed request contained the mark")
	}
	if !has(t, srv, m) {
		t.Fatalf("mark not in the log")
	}
}

func checkDelay(t *testing.T, srv server) {
	p := proxy(t, srv)
	m := mark(t)
	const d = 500 * time.Millisecond
	p.Rules().Add(chaos.Contains([]byte(m)), chaos.Delay(d), 1)
	ctx, cancel := appendCtx(30 * time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.j.append(ctx, p.Addr(), m); err != nil {
		t.Fatalf("append through the proxy: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("a request delayed %v was answered after %v", d, took)
	}
	if !has(t, srv, m) {
		t.Fatalf("delayed mark not in the log")
	}
}

// checkHold: the first append is held; a second, on another connection,
// passes it; after Release the first is applied last.
func checkHold(t *testing.T, srv server) {
	p := proxy(t, srv)
	first, second := mark(t), mark(t)
	h := chaos.NewHold()
	p.Rules().Add(chaos.Contains([]byte(first)), h, 1)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := appendCtx(60 * time.Second)
		defer cancel()
		done <- srv.j.append(ctx, p.Addr(), first)
	}()
	select {
	case <-h.Held():
	case err := <-done:
		t.Fatalf("the held append returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first append never reached the proxy")
	}
	ctx, cancel := appendCtx(30 * time.Second)
	defer cancel()
	if err := srv.j.append(ctx, p.Addr(), second); err != nil {
		t.Fatalf("the second append, on another connection while the first is held: %v", err)
	}
	if has(t, srv, first) {
		t.Fatal("the held append was applied before its release")
	}
	h.Release()
	select {
	case <-h.Answered():
	case <-time.After(30 * time.Second):
		t.Fatal("the held request was not answered after its release")
	}
	if err := <-done; err != nil {
		t.Fatalf("the held append after its release: %v", err)
	}
	es, err := srv.j.entries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i, j := slices.Index(es, first), slices.Index(es, second)
	if i < 0 || j < 0 || i < j {
		t.Fatalf("log %v: want %s (released late) after %s", es, first, second)
	}
}

func checkDropReply(t *testing.T, srv server) {
	p := proxy(t, srv)
	m := mark(t)
	r := p.Rules().Add(chaos.Contains([]byte(m)), chaos.DropReply(), 1)
	ctx, cancel := appendCtx(10 * time.Second)
	defer cancel()
	err := srv.j.append(ctx, p.Addr(), m)
	select {
	case <-r.Fired():
	default:
		t.Fatalf("the rule never fired (append: %v)", err)
	}
	if err == nil {
		t.Fatalf("the append whose reply was dropped succeeded")
	}
	t.Logf("append with its reply dropped: %v", err)
	if !has(t, srv, m) {
		t.Fatalf("the request whose reply was dropped was not applied")
	}
}

func checkCut(t *testing.T, srv server) {
	p := proxy(t, srv)
	m := mark(t)
	p.Rules().Add(chaos.Contains([]byte(m)), chaos.CutMidRequest(), 0)
	ctx, cancel := appendCtx(10 * time.Second)
	defer cancel()
	err := srv.j.append(ctx, p.Addr(), m)
	if err == nil {
		t.Fatalf("an append cut mid-request succeeded")
	}
	t.Logf("append cut mid-request: %v", err)
	if has(t, srv, m) {
		t.Fatalf("a request cut in half was applied")
	}
}

func checkBlackHole(t *testing.T, srv server) {
	p := proxy(t, srv)
	m := mark(t)
	p.Rules().Add(chaos.Contains([]byte(m)), chaos.BlackHole(), 0)
	ctx, cancel := appendCtx(2 * time.Second)
	defer cancel()
	err := srv.j.append(ctx, p.Addr(), m)
	if err == nil {
		t.Fatalf("an append into a black hole succeeded")
	}
	t.Logf("append into a black hole: %v", err)
	if has(t, srv, m) {
		t.Fatalf("a request swallowed by a black hole was applied")
	}
}

// --- the servers ---

type redisJournal struct{ direct *goredis.Client }

func redisServer(t *testing.T) server {
	s := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return server{name: "redis", addr: s.Addr(), framer: chaos.RESP, j: redisJournal{c}}
}

func (j redisJournal) append(ctx context.Context, addr, m string) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	return c.RPush(ctx, "journal", m).Err()
}

func (j redisJournal) entries(ctx context.Context) ([]string, error) {
	return j.direct.LRange(ctx, "journal", 0, -1).Result()
}

type pgJournal struct{ url, table string }

func postgresServer(t *testing.T) server {
	raw := testserver.PostgresURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	j := pgJournal{url: raw, table: "chaos_journal_" + backend.NewNonce().String()[:12]}
	ctx, cancel := appendCtx(30 * time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE TABLE "+j.table+" (id bigserial PRIMARY KEY, mark text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := appendCtx(30 * time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, raw); err == nil {
			c.Exec(ctx, "DROP TABLE "+j.table)
			c.Close(ctx)
		}
	})
	return server{name: "postgres", addr: u.Host, framer: chaos.Postgres, j: j}
}

func (j pgJournal) append(ctx context.Context, addr, m string) error {
	u, _ := url.Parse(j.url)
	u.Host = addr
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, "INSERT INTO "+j.table+" (mark) VALUES ($1)", m)
	return err
}

func (j pgJournal) entries(ctx context.Context) ([]string, error) {
	c, err := pgx.Connect(ctx, j.url)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT mark FROM "+j.table+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

type mysqlJournal struct {
	cfg   *mysql.Config
	table string
}

func mysqlServer(t *testing.T) server {
	u, err := url.Parse(testserver.MySQLURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	cfg.Logger = log.New(io.Discard, "", 0) // the cut connections are the point
	j := mysqlJournal{cfg: cfg, table: "chaos_journal_" + backend.NewNonce().String()[:12]}
	db := j.open(t, u.Host)
	ctx, cancel := appendCtx(30 * time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+j.table+" (id bigint AUTO_INCREMENT PRIMARY KEY, mark varchar(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + j.table) })
	return server{name: "mysql", addr: u.Host, framer: chaos.MySQL, j: j}
}

func (j mysqlJournal) db(addr string) (*sql.DB, error) {
	cfg := j.cfg.Clone()
	cfg.Addr = addr
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	return db, nil
}

func (j mysqlJournal) open(t *testing.T, addr string) *sql.DB {
	db, err := j.db(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (j mysqlJournal) append(ctx context.Context, addr, m string) error {
	db, err := j.db(addr)
	if err != nil {
		return err
	}
	defer db.Close()
	// A connection first, so that the INSERT is not retried on a new one.
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "INSERT INTO "+j.table+" (mark) VALUES (?)", m)
	return err
}

func (j mysqlJournal) entries(ctx context.Context) ([]string, error) {
	db, err := j.db(j.cfg.Addr)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT mark FROM "+j.table+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

type zkJournal struct{ addr, dir string }

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

func zookeeperServer(t *testing.T) server {
	s := testserver.ZooKeeper(t)
	return server{name: "zookeeper", addr: s.Addr(), framer: chaos.ZooKeeper, j: zkJournal{addr: s.Addr(), dir: "/journal"}}
}

// call runs fn on a fresh session at addr; the session's requests fail
// when ctx ends (the client closes).
func (j zkJournal) call(ctx context.Context, addr string, fn func(c *zk.Conn) error) error {
	c, events, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		return err
	}
	var once sync.Once
	closeConn := func() { once.Do(c.Close) }
	defer closeConn()
	stop := context.AfterFunc(ctx, closeConn)
	defer stop()
	for ev := range events {
		if ev.State == zk.StateHasSession {
			break
		}
	}
	if _, err := c.Create(j.dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return fn(c)
}

func (j zkJournal) append(ctx context.Context, addr, m string) error {
	return j.call(ctx, addr, func(c *zk.Conn) error {
		_, err := c.Create(j.dir+"/e-", []byte(m), zk.FlagSequence, zk.WorldACL(zk.PermAll))
		return err
	})
}

func (j zkJournal) entries(ctx context.Context) ([]string, error) {
	var out []string
	err := j.call(ctx, j.addr, func(c *zk.Conn) error {
		names, _, err := c.Children(j.dir)
		if err != nil {
			return err
		}
		slices.Sort(names) // sequence numbers are zero-padded
		for _, n := range names {
			b, _, err := c.Get(j.dir + "/" + n)
			if err != nil {
				return err
			}
			out = append(out, string(b))
		}
		return nil
	})
	return out, err
}

type etcdJournal struct{ addr string }

func etcdServer(t *testing.T) server {
	s := testserver.Etcd(t)
	return server{name: "etcd", addr: s.Addr(), framer: chaos.HTTP2, j: etcdJournal{s.Addr()}}
}

func (j etcdJournal) client(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (j etcdJournal) append(ctx context.Context, addr, m string) error {
	c, err := j.client(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Put(ctx, "journal/"+m, m)
	return err
}

func (j etcdJournal) entries(ctx context.Context) ([]string, error) {
	c, err := j.client(j.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, err := c.Get(ctx, "journal/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range r.Kvs {
		out = append(out, string(kv.Value))
	}
	return out, nil
}

// --- seeds for the fuzz targets, from real traffic ---

// recording wraps a framer constructor and keeps every frame each way.
type recording struct {
	newFramer func() chaos.Framer
	mu        sync.Mutex
	conns     []*recorder
}

type recorder struct {
	f                 chaos.Framer
	mu                sync.Mutex
	requests, replies []byte
}

func (r *recording) framer() chaos.Framer {
	rec := &recorder{f: r.newFramer()}
	r.mu.Lock()
	r.conns = append(r.conns, rec)
	r.mu.Unlock()
	return rec
}

func (r *recorder) Request(b []byte) (chaos.Frame, error) {
	fr, err := r.f.Request(b)
	if err == nil && fr.Len > 0 {
		r.mu.Lock()
		r.requests = append(r.requests, b[:fr.Len]...)
		r.mu.Unlock()
	}
	return fr, err
}

func (r *recorder) Reply(b []byte) (chaos.Frame, error) {
	fr, err := r.f.Reply(b)
	if err == nil && fr.Len > 0 {
		r.mu.Lock()
		r.replies = append(r.replies, b[:fr.Len]...)
		r.mu.Unlock()
	}
	return fr, err
}

var fuzzTargets = map[string]string{
	"redis": "FuzzRESPFramer", "postgres": "FuzzPostgresFramer", "mysql": "FuzzMySQLFramer",
	"zookeeper": "FuzzZooKeeperFramer", "etcd": "FuzzHTTP2Framer",
}

// writeSeeds writes the first connection's streams (capped at 4 KiB) as
// corpus entries of the protocol's fuzz target.
func (r *recording) writeSeeds(t *testing.T, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.conns) == 0 {
		return
	}
	c := r.conns[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	dir := filepath.Join("testdata", "fuzz", fuzzTargets[name])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		b     []byte
		reply bool
	}{{c.requests, false}, {c.replies, true}} {
		b := s.b[:min(len(s.b), 4096)]
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\nbyte('\\x07')\n", b, s.reply)
		f := filepath.Join(dir, fmt.Sprintf("real-%s-%s-reply-%v", name, t.Name()[strings.LastIndex(t.Name(), "/")+1:], s.reply))
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
