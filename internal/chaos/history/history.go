// Package history is the record the chaos harness's worker processes keep of
// what they did: one JSON object per line (JSONL), appended with a single
// O_APPEND write per event, timestamped with the host's CLOCK_MONOTONIC so
// that every process on the host shares one timeline that no injected clock
// skew and no NTP step can bend.
//
// Backend operations are recorded as a pair: the caller writes an Event with
// Phase "call" before sending and one with Phase "return" (or nothing, when
// the process was killed first) after the reply. The checker joins them by
// Process and Op id; an operation without a return, or whose outcome could
// not be known (a timeout), is indeterminate.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// Kinds of events.
const (
	// Backend lease operations (the lock workload).
	Acquire = "acquire"
	Renew   = "renew"
	Release = "release"
	// Backend ledger operations (the scheduler workload).
	Claim     = "claim"
	Reclaim   = "reclaim"
	Heartbeat = "heartbeat"
	Finish    = "finish"
	// Workload events (Phase "event").
	Hold     = "hold"     // the lock workload got a lock (Token)
	Lose     = "lose"     // a held lock's context was cancelled by loss (Token), or a run's lease was lost (Key, Token, Op of its Start; Result: how its context ended)
	Start    = "start"    // a job occurrence started (Key, Token, Attempt)
	End      = "end"      // a job occurrence's function returned
	Effect   = "effect"   // a side effect was written: Sink says where, Result whether accepted
	Fault    = "fault"    // the harness applied (Phase call) or ended (Phase return) a fault
	Boundary = "boundary" // the harness's workload window (Phase call: start, return: end)
)

// Phases.
const (
	Call   = "call"
	Return = "return"
	Point  = "event"
)

// Results of an operation's return.
const (
	OK            = "ok"
	Held          = "held"          // acquire: held by another owner (HeldToken)
	Lost          = "lost"          // renew/release/heartbeat/finish: not held by the caller
	Claimed       = "claimed"       // claim: someone else's
	Refused       = "refused"       // an answer that changed nothing (too early, not expired...)
	Indeterminate = "indeterminate" // the outcome cannot be known
	Accepted      = "accepted"      // effect at the fenced sink
	Rejected      = "rejected"      // effect refused by the fenced sink (stale token)
	// How a run's context stood when its lease was lost (a Lose event):
	// Lost is cancelled with ErrLeaseLost, Cancelled is cancelled before,
	// for another cause (its timeout; Detail), Running is not cancelled.
	Cancelled = "cancelled"
	Running   = "running"
)

// Event is one line of a history.
type Event struct {
	T       int64  `json:"t"`             // CLOCK_MONOTONIC, ns
	Process string `json:"proc"`          // worker name ("w3") or "harness"
	PID     int    `json:"pid,omitempty"` // OS process id
	Op      uint64 `json:"op,omitempty"`  // joins a call with its return, per Process+PID
	Phase   string `json:"phase"`         // call, return, event
	Kind    string `json:"kind"`          // see the constants
	Key     string `json:"key,omitempty"` // lease key, or job@instant for occurrences
	Owner   string `json:"owner,omitempty"`
	Token   uint64 `json:"token,string,omitempty"`
	TTL     int64  `json:"ttl,omitempty"` // ns: requested on call, granted on return
	Attempt int    `json:"attempt,omitempty"`
	Result  string `json:"result,omitempty"`
	// HeldToken is the holder's token reported with a Held or Claimed answer.
	HeldToken uint64 `json:"held_token,string,omitempty"`
	Sink      string `json:"sink,omitempty"` // fenced or unfenced
	Detail    string `json:"detail,omitempty"`
	// Late is, on a Start event, how late the run started after its
	// occurrence's instant on the worker's scheduler clock (ns).
	Late int64 `json:"late,omitempty"`
}

// Writer appends events to a file. It is safe for concurrent use.
type Writer struct {
	process string
	pid     int
	mu      sync.Mutex
	f       *os.File
	ops     atomic.Uint64
	err     error
}

// Create opens (creating or appending to) the history file at path for
// events of the named process.
func Create(path, process string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Writer{process: process, pid: os.Getpid(), f: f}, nil
}

// NextOp returns a fresh operation id.
func (w *Writer) NextOp() uint64 { return w.ops.Add(1) }

// Write stamps e (time, process, pid) and appends it as one line. The first
// write error is kept and returned by Close; history is best effort for a
// process that is being killed.
func (w *Writer) Write(e Event) {
	if e.T == 0 {
		e.T = Mono()
	}
	e.Process, e.PID = w.process, w.pid
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // Event has only plain fields
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(b); err != nil && w.err == nil { // one O_APPEND write per line
		w.err = err
	}
}

// Close closes the file, returning the first write error if there was one.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cerr := w.f.Close()
	if w.err != nil {
		return fmt.Errorf("history: %w", w.err)
	}
	return cerr
}

// Read parses a history. A torn last line (a process killed mid-write) is
// skipped; any other malformed line is an error naming its number.
func Read(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Event
	var bad error
	for n := 1; sc.Scan(); n++ {
		if bad != nil {
			return nil, bad // the bad line was not the last
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad = fmt.Errorf("history: line %d: %w", n, err)
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return out, nil
}

// ReadFile reads the history at path.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Read(f)
}
