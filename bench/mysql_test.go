package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// mysqlBackend opens leasehold's MySQL backend in a fresh database on the
// shared MariaDB server (dropped at the end of the benchmark).
func mysqlBackend(b *testing.B) *mysql.Backend {
	u := testserver.MySQLURL(b)
	name := "lh_bench_" + backend.NewNonce().String()[:16]
	testserver.MySQLExec(b, u, "CREATE DATABASE "+name)
	b.Cleanup(func() { testserver.MySQLExec(b, u, "DROP DATABASE IF EXISTS "+name) })
	i := strings.LastIndex(u, "/")
	ctx := context.Background()
	be, err := mysql.Open(ctx, u[:i+1]+name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	be.DB().SetMaxOpenConns(sqlPool)
	be.DB().SetMaxIdleConns(sqlPool)
	if _, err := be.DB().ExecContext(ctx, "CREATE TABLE floor (k VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		b.Fatal(err)
	}
	// Open the whole pool now, outside every benchmark's timing.
	var conns []*sql.Conn
	for range sqlPool {
		c, err := be.DB().Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	return be
}

// mysqlODKUFloor: one INSERT … ON DUPLICATE KEY UPDATE round trip (the
// shape of leasehold's acquire) plus a DELETE.
func mysqlODKUFloor(be *mysql.Backend) pair {
	return func(ctx context.Context, key string) error {
		if _, err := be.DB().ExecContext(ctx, "INSERT INTO floor (k, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token + 1", key); err != nil {
			return err
		}
		_, err := be.DB().ExecContext(ctx, "DELETE FROM floor WHERE k = ?", key)
		return err
	}
}

func BenchmarkMySQL(b *testing.B) {
	be := mysqlBackend(b)
	impls := []struct {
		name string
		p    pair
	}{
		{"leasehold", lockerPair(be)},
		{"leasehold-backend", leaseholdPair(be)},
		{"floor-odku+delete", mysqlODKUFloor(be)},
	}
	for _, g := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("g%d/%s", g, im.name), func(b *testing.B) { runLatency(b, im.p, g) })
		}
	}
}
