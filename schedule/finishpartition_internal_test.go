package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestFinishAppliedRealBackends: Finish applied, reply lost, retry
// refused as lost; finishRun's GetRun comparison (owner, token, state)
// must recognise the run as finished by us after a real round trip, for a
// Failed outcome with bytes the column cannot hold as they are.
func TestFinishAppliedRealBackends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "rv" + backend.NewNonce().String()[:8] + "_"
	open := map[string]func() (backend.Backend, error){
		"postgres": func() (backend.Backend, error) {
			return postgres.Open(ctx, testserver.PostgresURL(t), postgres.WithTablePrefix(prefix))
		},
		"mysql": func() (backend.Backend, error) {
			return mysql.Open(ctx, testserver.MySQLURL(t), mysql.WithTablePrefix(prefix))
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			b, err := o()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			defer func() {
				if name == "postgres" {
					tables := "leasehold." + prefix + "jobs, leasehold." + prefix + "leases, leasehold." + prefix + "meta, leasehold." + prefix + "runs"
					if c, err := pgx.Connect(context.Background(), testserver.PostgresURL(t)); err == nil {
						_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+tables+" CASCADE")
						c.Close(context.Background())
					}
					return
				}
				testserver.MySQLExec(t, testserver.MySQLURL(t), "DROP TABLE IF EXISTS "+prefix+"jobs, "+prefix+"leases, "+prefix+"meta, "+prefix+"runs")
			}()
			fb := &lostFinishReply{Backend: b}
			at := backend.Instant(time.Now().Add(-time.Second))
			c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "inst ", TTL: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ferr := c.Finish(ctx, errors.New("bad \x00 \xc3"))
			r, _ := b.GetRun(ctx, "once", at)
			if ferr != nil {
				t.Fatalf("Finish: %v (ledger: %s owner %v token %d)", ferr, r.State, r.Owner, r.Token)
			}
		})
	}
}

// dropAfterFinish is a PostgreSQL backend reached through a chaos proxy:
// the first Finish is applied and its reply "lost" (reported as a broken
// connection); the retry is refused as lost; then the network goes dark
// (the proxy black-holes every byte) just as finishRun reads the ledger.
type dropAfterFinish struct {
	backend.Backend
	p *chaos.Proxy
	n int
}

func (b *dropAfterFinish) Finish(ctx context.Context, req backend.FinishRequest) error {
	b.n++
	err := b.Backend.Finish(ctx, req)
	if b.n == 1 && err == nil {
		return errors.New("injected: connection reset (the Finish was applied)")
	}
	if b.n == 2 {
		b.p.SetDrop(true)
	}
	return err
}

// TestFinishRunBoundedOnPostgresPartition: the Scheduler calls finishRun with
// context.Background(); its GetRun after an unknown Finish has no deadline,
// and pgx has none of its own, so a partition at that moment blocks the
// run's goroutine (and its inflight slot) far past the run's lease deadline.
func TestFinishRunBoundedOnPostgresPartition(t *testing.T) {
	p, err := chaos.New("127.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "rv" + backend.NewNonce().String()[:8] + "_"
	u := strings.Replace(testserver.PostgresURL(t), "127.0.0.1:5432", p.Addr(), 1)
	pb, err := postgres.Open(ctx, u, postgres.WithTablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if c, err := pgx.Connect(context.Background(), testserver.PostgresURL(t)); err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS leasehold."+prefix+"jobs, leasehold."+prefix+"leases, leasehold."+prefix+"meta, leasehold."+prefix+"runs CASCADE")
			c.Close(context.Background())
		}
	}()
	defer pb.Close()
	fb := &dropAfterFinish{Backend: pb, p: p}
	at := backend.Instant(time.Now().Add(-time.Second))
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	const ttl = 2 * time.Second
	sent := time.Now()
	g, err := pb.Claim(ctx, backend.ClaimRequest{Job: "once", ScheduledAt: at, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	until := sent.Add(defaultLease.span(g.TTL))
	done := make(chan error, 1)
	go func() {
		done <- finishRun(context.Background(), fb, "once", at, owner, g.Token, backend.Outcome{State: backend.Succeeded}, until, g.TTL)
	}()
	limit := time.Until(until) + 5*time.Second
	select {
	case err := <-done:
		t.Logf("finishRun returned %v", err)
	case <-time.After(limit):
		p.SetDrop(false)
		p.CloseConns() // let the goroutine end
		t.Fatalf("finishRun still blocked in GetRun %v past the run's lease deadline", 5*time.Second)
	}
}
