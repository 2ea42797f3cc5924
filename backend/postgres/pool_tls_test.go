package postgres

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestNewWithApplicationPool: New over a pool the application made works
// (grants, push wake-ups), Close leaves the application's pool open, and a
// nil pool is refused.
func TestNewWithApplicationPool(t *testing.T) {
	u, schema := freshSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := New(ctx, nil); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("New(nil pool) = %v, want ErrInvalid", err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if b.Pool() != pool {
		t.Fatal("Pool() is not the application's pool")
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "app/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "app/k")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "app/k", a, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no wake-up through the application's pool")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "app/k", a, time.Minute); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	var one int
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("the application's pool after the backend's Close: %v", err)
	}
	// A second backend on the same pool and schema sees the first one's
	// token counter.
	b2, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	g2, err := b2.Acquire(ctx, "app/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token %d on the reused pool not greater than %d", g2.Token, g.Token)
	}
}

// TestTLS: a private server with a certificate signed by a test CA, and
// pg_hba accepting TCP connections over TLS only. Open with
// sslmode=require and with sslmode=verify-full (against the CA) works and
// the session is encrypted (pg_stat_ssl); sslmode=disable is refused, and
// verify-full against another CA fails.
func TestTLS(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := filepath.Join(srv.Dir(), "data")
	certs := testserver.WriteTLSCerts(t, t.TempDir())
	other := testserver.WriteTLSCerts(t, t.TempDir())
	install := func(src, name string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(data, name)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 { // the server runs as postgres, which must own its key
			pu, err := user.Lookup("postgres")
			if err != nil {
				t.Fatal(err)
			}
			uid, _ := strconv.Atoi(pu.Uid)
			gid, _ := strconv.Atoi(pu.Gid)
			if err := os.Chown(dst, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(certs.Cert, "server.crt")
	install(certs.Key, "server.key")
	hba := "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(ctx, testserver.PostgresServerURL(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, s := range []string{`ALTER SYSTEM SET ssl = on`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	base := "postgres://postgres@" + srv.Addr() + "/postgres"
	var b *Backend
	for deadline := time.Now().Add(30 * time.Second); ; { // the reload is asynchronous
		b, err = Open(ctx, base+"?sslmode=require", WithSchema("tls"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Open with sslmode=require: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer b.Close()
	var encrypted bool
	if err := b.Pool().QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&encrypted); err != nil || !encrypted {
		t.Fatalf("sslmode=require session: ssl %v (%v), want true", encrypted, err)
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "tls/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "tls/k", a, g.Token); err != nil {
		t.Fatal(err)
	}

	v, err := Open(ctx, base+"?sslmode=verify-full&sslrootcert="+certs.CA, WithSchema("tls"))
	if err != nil {
		t.Fatalf("Open with sslmode=verify-full and the server's CA: %v", err)
	}
	defer v.Close()
	if g2, err := v.Acquire(ctx, "tls/k", a, time.Minute); err != nil || g2.Token <= g.Token {
		t.Fatalf("Acquire over verify-full: token %d, %v; want > %d", g2.Token, err, g.Token)
	}

	if _, err := Open(ctx, base+"?sslmode=verify-full&sslrootcert="+other.CA, WithSchema("tls")); err == nil {
		t.Fatal("Open with sslmode=verify-full against another CA succeeded")
	}
	_, err = Open(ctx, base+"?sslmode=disable", WithSchema("tls"))
	if err == nil || !strings.Contains(err.Error(), "no encryption") && !strings.Contains(err.Error(), "pg_hba.conf") {
		t.Fatalf("Open with sslmode=disable against a hostssl-only server: %v, want refused by pg_hba.conf", err)
	}
}

// TestPasswordNotInErrors: a password in the URL never appears in Open's
// errors, whether the URL is malformed, the server unreachable, or the
// password wrong (a private server that requires scram-sha-256).
func TestPasswordNotInErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const pw = "s3cret-PW-value"
	srv := testserver.Postgres(t)
	admin, err := pgxpool.New(ctx, testserver.PostgresServerURL(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `CREATE ROLE pwuser LOGIN PASSWORD 'the-right-one'`); err != nil {
		t.Fatal(err)
	}
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(srv.Dir(), "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"postgres://pwuser:" + pw + "@127.0.0.1:notaport/db",
		"postgres://pwuser:" + pw + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
		"postgres://pwuser:" + pw + "@" + srv.Addr() + "/postgres?sslmode=disable",
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
		if strings.HasPrefix(u, "postgres://pwuser:"+pw+"@"+srv.Addr()) && !strings.Contains(err.Error(), "28P01") {
			t.Errorf("wrong password: %v, want authentication failed (28P01)", err)
		}
	}
}
