package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/history"
)

// busyTracker follows the history file as the workers append to it and
// keeps, per worker, the job runs that have started and not ended, so that
// a pause can be aimed at a worker in the middle of a run (the GC pause
// between a job's last check and its write).
type busyTracker struct {
	mu      sync.Mutex
	running map[string]map[string]bool // worker → occurrence key#token
}

func trackBusy(ctx context.Context, path string) *busyTracker {
	bt := &busyTracker{running: map[string]map[string]bool{}}
	go bt.follow(ctx, path)
	return bt
}

func (bt *busyTracker) follow(ctx context.Context, path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial []byte
	for ctx.Err() == nil {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			partial = append(partial, line...)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return
		}
		line = append(partial, line...)
		partial = nil
		var e history.Event
		if json.Unmarshal(line, &e) != nil || (e.Kind != history.Start && e.Kind != history.End) ||
			!strings.HasPrefix(e.Key, JobName+"@") { // runs that write effects: a pause there is what the controls need
			continue
		}
		id := e.Key + "#" + strconv.FormatUint(e.Token, 10)
		bt.mu.Lock()
		m := bt.running[e.Process]
		if m == nil {
			m = map[string]bool{}
			bt.running[e.Process] = m
		}
		if e.Kind == history.Start {
			m[id] = true
		} else {
			delete(m, id)
		}
		bt.mu.Unlock()
	}
}

// forget clears a worker's runs (it was killed: they will never end).
func (bt *busyTracker) forget(worker string) {
	bt.mu.Lock()
	delete(bt.running, worker)
	bt.mu.Unlock()
}

// waitBusy waits up to within for worker to be running a job, and reports
// whether it is.
func (bt *busyTracker) waitBusy(ctx context.Context, worker string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		bt.mu.Lock()
		n := len(bt.running[worker])
		bt.mu.Unlock()
		if n > 0 {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}
