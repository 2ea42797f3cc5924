package mysql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// retryFor runs fn until it succeeds or d passes, for calls made while the
// pool reconnects after a server restart.
func retryFor(t *testing.T, d time.Duration, what string, fn func() error) {
	faultkit.Retry(t, d, what, fn)
}

// TestRestartKeepsTokens crashes a private MariaDB (SIGKILL) while one lease
// is held directly through the backend and another by a Locker whose
// watchdog renews it, starts the server again (InnoDB crash recovery) and
// checks: the directly held lease is still there with its token; the
// Locker's holder either kept its lease (renewals resumed and the server
// shows its token) or lost it cleanly (its context ended); and every later
// grant's token is greater than every token before the crash.
func TestRestartKeepsTokens(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := Open(ctx, testserver.MariaDBURL(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Capabilities().DurableFencing {
		t.Fatal("private server: DurableFencing false, want true (innodb_flush_log_at_trx_commit=1)")
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	var last uint64
	for range 5 {
		g, err := b.Acquire(ctx, "r/k", a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		last = g.Token
		if err := b.Release(ctx, "r/k", a, g.Token); err != nil {
			t.Fatal(err)
		}
	}
	held, err := b.Acquire(ctx, "r/k", a, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if held.Token <= last {
		t.Fatalf("token %d not greater than %d", held.Token, last)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("watched"), leasehold.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "r/locker")
	if err != nil {
		t.Fatal(err)
	}
	lockerKey := leasehold.LockKey(lk.Namespace(), "r/locker")

	srv.Kill()
	srv.Start()
	restarted := time.Now()

	var got backend.Lease
	retryFor(t, time.Minute, "Get after restart", func() error { got, err = b.Get(ctx, "r/k"); return err })
	if got.Owner != a || got.Token != held.Token {
		t.Fatalf("after the restart the lease is %+v, want owner a with token %d", got, held.Token)
	}
	if _, err := b.Acquire(ctx, "r/k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute); !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Acquire of the held key after restart: %v, want ErrLeaseHeld", err)
	}

	// The Locker's holder: wait until it either renewed after the restart
	// (the server's remaining time exceeds what was left of a grant made
	// before the restart) or gave up.
	survived := false
	for deadline := time.Now().Add(time.Minute); !survived; {
		select {
		case <-l.Done():
		default:
			if sl, err := b.Get(ctx, lockerKey); err == nil && sl.Token == uint64(l.Token()) &&
				sl.Remaining > 20*time.Second-time.Since(restarted)+time.Second {
				survived = true
				continue
			}
			if time.Now().After(deadline) {
				t.Fatal("the Locker's holder neither renewed after the restart nor gave up within a minute")
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
	if survived {
		t.Logf("the Locker's holder renewed after the restart (token %d)", l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("the Locker's holder gave up: %v", context.Cause(l.Context()))
	}
	lk2, err := leasehold.NewLocker(b, leasehold.WithInstance("next"), leasehold.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next, err := lk2.Acquire(ctx, "r/locker") // waits out an abandoned lease
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("the next holder's token %d is not greater than %d", next.Token(), l.Token())
	}

	if err := b.Release(ctx, "r/k", a, held.Token); err != nil {
		t.Fatal(err)
	}
	g, err := b.Acquire(ctx, "r/k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= held.Token {
		t.Fatalf("token after restart %d not greater than %d", g.Token, held.Token)
	}
}

// TestTLS: a private MariaDB with a certificate signed by a test CA and a
// user that REQUIRE SSL. OpenConfig with a tls.Config verifying the server
// against the CA works and the session is encrypted (Ssl_cipher); the URL
// form with tls=skip-verify works too; without TLS the user is refused,
// and verification against another CA fails.
func TestTLS(t *testing.T) {
	certs := testserver.WriteTLSCerts(t, t.TempDir())
	other := testserver.WriteTLSCerts(t, t.TempDir())
	srv := testserver.MariaDB(t, "--ssl-ca="+certs.CA, "--ssl-cert="+certs.Cert, "--ssl-key="+certs.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := testserver.MariaDBURL(srv)
	testserver.MySQLExec(t, root,
		"CREATE DATABASE tlsdb",
		"CREATE USER 'sec'@'127.0.0.1' IDENTIFIED BY 'tls-pw' REQUIRE SSL",
		"GRANT ALL ON tlsdb.* TO 'sec'@'127.0.0.1'")

	pool := func(caFile string) *tls.Config {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pem) {
			t.Fatal("no CA certificate in " + caFile)
		}
		return &tls.Config{RootCAs: p, MinVersion: tls.VersionTLS12}
	}
	cfg, err := ParseURL("mysql://sec:tls-pw@" + srv.Addr() + "/tlsdb")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS = pool(certs.CA)
	b, err := OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("OpenConfig with TLS verified against the CA: %v", err)
	}
	defer b.Close()
	var name, cipher string
	if err := b.DB().QueryRowContext(ctx, `SHOW SESSION STATUS LIKE 'Ssl_cipher'`).Scan(&name, &cipher); err != nil || cipher == "" {
		t.Fatalf("Ssl_cipher %q (%v), want a cipher", cipher, err)
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "tls/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "tls/k", a, g.Token); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, "mysql://sec:tls-pw@"+srv.Addr()+"/tlsdb?tls=skip-verify")
	if err != nil {
		t.Fatalf("Open with tls=skip-verify: %v", err)
	}
	defer s.Close()
	if g2, err := s.Acquire(ctx, "tls/k", a, time.Minute); err != nil || g2.Token <= g.Token {
		t.Fatalf("Acquire over tls=skip-verify: token %d, %v; want > %d", g2.Token, err, g.Token)
	}

	_, err = Open(ctx, "mysql://sec:tls-pw@"+srv.Addr()+"/tlsdb")
	var me *driver.MySQLError
	if !errors.As(err, &me) || me.Number != 1045 {
		t.Fatalf("Open without TLS for a REQUIRE SSL user: %v, want access denied (1045)", err)
	}
	if err != nil && strings.Contains(err.Error(), "tls-pw") {
		t.Fatalf("error shows the password: %v", err)
	}
	cfg.TLS = pool(other.CA)
	if _, err := OpenConfig(ctx, cfg); err == nil {
		t.Fatal("OpenConfig verifying the server against another CA succeeded")
	}
}

// TestNewWithApplicationDB: New over a *sql.DB the application opened with
// the required DSN settings works, Close leaves it open, and a *sql.DB
// missing a setting is refused with ErrSessionUnsuitable naming it, before any table
// is created.
func TestNewWithApplicationDB(t *testing.T) {
	u := freshDB(t)
	cfg, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := New(ctx, nil); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("New(nil) = %v, want ErrInvalid", err)
	}
	open := func(mutate func(c *driver.Config)) *sql.DB {
		c := cfg.Clone()
		mutate(c)
		conn, err := driver.NewConnector(c)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		t.Cleanup(func() { db.Close() })
		return db
	}
	for _, bad := range []struct {
		name   string
		mutate func(c *driver.Config)
		want   string
	}{
		{"no time_zone", func(c *driver.Config) { delete(c.Params, "time_zone") }, "time_zone"},
		{"no parseTime", func(c *driver.Config) { c.ParseTime = false }, "parseTime"},
		{"no clientFoundRows", func(c *driver.Config) { c.ClientFoundRows = false }, "clientFoundRows"},
	} {
		_, err := New(ctx, open(bad.mutate))
		if !errors.Is(err, ErrSessionUnsuitable) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: New = %v, want ErrSessionUnsuitable naming %s", bad.name, err, bad.want)
		}
	}
	db := open(func(*driver.Config) {})
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("refused News left %d tables (%v), want none", tables, err)
	}
	b, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if b.DB() != db {
		t.Fatal("DB() is not the application's *sql.DB")
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "app/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "app/k", a, g.Token); err != nil {
		t.Fatalf("Release through the application's db: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "app/k", a, time.Minute); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the application's db after the backend's Close: %v", err)
	}
	b2, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if g2, err := b2.Acquire(ctx, "app/k", a, time.Minute); err != nil || g2.Token <= g.Token {
		t.Fatalf("second backend on the same db: token %d, %v; want > %d", g2.Token, err, g.Token)
	}

	// The DSN parameters New's documentation gives are enough.
	dsn := cfg.User + "@tcp(" + cfg.Addr + ")/" + cfg.DBName + "?parseTime=true&loc=UTC&clientFoundRows=true&time_zone=%27%2B00%3A00%27"
	viaDSN, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer viaDSN.Close()
	b3, err := New(ctx, viaDSN)
	if err != nil {
		t.Fatalf("New over a *sql.DB opened with the documented DSN: %v", err)
	}
	b3.Close()
}

// TestPasswordNotInErrors: a password in the URL never appears in errors,
// whether the URL is malformed, the server unreachable, or the password
// wrong.
func TestPasswordNotInErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const pw = "s3cret-PW-value"
	shared := testserver.MySQLURL(t)
	cfg, err := ParseURL(shared)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"mysql://root:" + pw + "@127.0.0.1:3306/test?bogus=1",
		"mysql://root:" + pw + "@127.0.0.1:3306/test?timeout=soon",
		"mysql://root:" + pw + "@127.0.0.1:1/test?timeout=2s",
		"mysql://nosuchuser:" + pw + "@" + cfg.Addr + "/test",
	} {
		b, err := Open(ctx, u)
		if err == nil {
			b.Close()
			t.Errorf("Open(%s) succeeded", redact(u))
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open error shows the password: %v", err)
		}
		var me *driver.MySQLError
		if strings.HasPrefix(u, "mysql://nosuchuser:") && (!errors.As(err, &me) || me.Number != 1045) {
			t.Errorf("unknown user: %v, want access denied (1045)", err)
		}
	}
}
