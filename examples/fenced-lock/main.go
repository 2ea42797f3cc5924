// Command fenced-lock shows the library's lock and its fencing token on the
// default backend, a SQLite file: two workers take the same key in turn,
// each writes to a store with its token, and the store refuses the first
// worker's late write because a greater token has been seen since — what a
// worker paused past its lease (GC, SIGSTOP, a stalled VM) would do.
//
//	go run ./fenced-lock [path/to/file.db]
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/sqlite"
)

// fencedStore is the resource the lock protects: it accepts a write only
// with a token at least as great as every token it has seen.
type fencedStore struct {
	mu      sync.Mutex
	highest leasehold.Token
	value   string
}

func (s *fencedStore) Write(t leasehold.Token, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t < s.highest {
		return fmt.Errorf("refused: token %d is older than %d", t, s.highest)
	}
	s.highest, s.value = t, v
	return nil
}

func run(ctx context.Context, out io.Writer, db string) error {
	b, err := sqlite.Open(ctx, db)
	if err != nil {
		return err
	}
	defer b.Close()
	var store fencedStore
	const key = "reports/daily"

	lockers := map[string]*leasehold.Locker{}
	for _, name := range []string{"worker-1", "worker-2"} {
		lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithNamespace("example"))
		if err != nil {
			return err
		}
		lockers[name] = lk
	}

	first, err := lockers["worker-1"].Acquire(ctx, key)
	if err != nil {
		return err
	}
	stale := first.Token()
	fmt.Fprintf(out, "worker-1 holds %s with token %d\n", key, stale)
	fmt.Fprintf(out, "worker-1 writes: %v\n", result(store.Write(stale, "report by worker-1")))
	// worker-1 "pauses"; its lease ends (here: it is released) and
	// worker-2 takes the key with a greater token.
	if err := first.Release(ctx); err != nil {
		return err
	}
	second, err := lockers["worker-2"].Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer second.Release(ctx)
	fmt.Fprintf(out, "worker-2 holds %s with token %d\n", key, second.Token())
	fmt.Fprintf(out, "worker-2 writes: %v\n", result(store.Write(second.Token(), "report by worker-2")))
	// worker-1 wakes up and writes with the token it had.
	fmt.Fprintf(out, "worker-1 wakes and writes with token %d: %v\n", stale, result(store.Write(stale, "late report by worker-1")))
	fmt.Fprintf(out, "the store holds: %q\n", store.value)
	return nil
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "accepted"
}

func main() {
	db := filepath.Join(os.TempDir(), "leasehold-fenced-lock.db")
	if len(os.Args) > 1 {
		db = os.Args[1]
	}
	if err := run(context.Background(), os.Stdout, db); err != nil {
		log.Fatal(err)
	}
}
