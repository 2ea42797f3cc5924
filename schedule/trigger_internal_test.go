package schedule

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// slowMarkerFinish holds the Finish of a trigger key's marker until
// release is closed, as a loaded SQLite holds a write behind others.
type slowMarkerFinish struct {
	backend.Backend
	release chan struct{}
}

func (b *slowMarkerFinish) Finish(ctx context.Context, req backend.FinishRequest) error {
	if strings.Contains(req.Job, triggerInfix) {
		<-b.release
	}
	return b.Backend.Finish(ctx, req)
}

// TestTriggeredRunStartsBeforeTheMarkerIsRecorded: TriggerRun recorded the
// trigger key's outcome before it started the run, and the run's
// heartbeats start with the run: in a chaos run on a loaded SQLite that
// write took 7.6 s, the won claim's lease lapsed unrenewed, another
// instance reclaimed the occurrence, and then the job was started on the
// dead lease beside it. The run (and its heartbeats) must not wait for the
// marker.
func TestTriggeredRunStartsBeforeTheMarkerIsRecorded(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	b := &slowMarkerFinish{Backend: mem, release: make(chan struct{})}
	defer func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
	}()
	s, err := New(b, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan Run, 1)
	err = s.Register(Job{Name: "manual", Schedule: "0 0 1 1 *", LeaseTTL: time.Second,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	triggered := make(chan error, 1)
	go func() { triggered <- s.Trigger(ctx, "manual", "k1") }()
	select {
	case r := <-ran:
		if r.Attempt != 1 {
			t.Fatalf("the triggered run started as attempt %d: its claim's lease lapsed while the trigger key's record was written, and it was recovered", r.Attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the triggered run did not start while its trigger key's record was being written")
	}
	close(b.release)
	if err := <-triggered; err != nil {
		t.Fatalf("Trigger: %v", err)
	}
}
