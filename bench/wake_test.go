package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"

	exptrace "golang.org/x/exp/trace"

	"github.com/leasehold/leasehold/backend/redis"
)

// BenchmarkBurstWake is the trace behind docs/benchmarks.md's "The cause,
// traced on a quiet host": one burst (the seed's scenario, 10,000 clients,
// or the first size $LEASEHOLD_BURST_CLIENTS lists) for
// leasehold on one node and for redislock, each traced with runtime/trace,
// and from each trace how long the goroutine that reads a reply waited to
// run after the socket said the reply had arrived:
//
//	cd bench && go test -run '^$' -bench '^BenchmarkBurstWake$' -benchtime 1x
//
// For leasehold that goroutine is a lane of internal/redispipe (one
// pipeline's replies for a whole batch of callers), and each caller then
// waits again to run once the lane hands it its reply (hop2-*); for
// redislock it is the caller itself, on a pooled connection of its own.
// Reported: sock-wakes (how many such wake-ups the trace holds),
// sock-p50/p90/max-ms (the wait from "readable" to running), and for
// leasehold hop2-p50/p90-ms; plus success-% of the traced burst (tracing
// costs CPU: expect it lower than BenchmarkBurst's).
func BenchmarkBurstWake(b *testing.B) {
	addrs := nodes(b)
	c := newClient(addrs[0])
	defer c.Close()
	warmPool(b, c)
	be, err := redis.New(c, redis.WithPrefix("wake:"))
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	n := 10000
	if os.Getenv("LEASEHOLD_BURST_CLIENTS") != "" {
		n = burstSizes(b)[0]
	}
	for _, im := range []seedImpl{lockerImpl("leasehold-redis", be), redislockImpl(c)} {
		b.Run(im.name, func(b *testing.B) {
			for range b.N {
				time.Sleep(500 * time.Millisecond) // the previous run's releases drain
				seedRun(im, min(n, 1000), fmt.Sprintf("wake-warm-%d", seedRuns.Add(1)))
				time.Sleep(500 * time.Millisecond)
				var buf bytes.Buffer
				if err := trace.Start(&buf); err != nil {
					b.Fatal(err)
				}
				r := seedRun(im, n, fmt.Sprintf("wake-%d", seedRuns.Add(1)))
				trace.Stop()
				w, err := wakeWaits(&buf)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(100*float64(r.OK)/float64(r.N), "success-%")
				reportWaits(b, "sock", w.socket, true)
				if len(w.hop2) > 0 {
					reportWaits(b, "hop2", w.hop2, false)
				}
			}
		})
	}
}

func reportWaits(b *testing.B, name string, d []time.Duration, withMax bool) {
	if len(d) == 0 {
		b.Fatalf("the trace holds no %s wake-up", name)
	}
	slices.Sort(d)
	q := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(d)), name+"-wakes")
	b.ReportMetric(q(.5), name+"-p50-ms")
	b.ReportMetric(q(.9), name+"-p90-ms")
	if withMax {
		b.ReportMetric(q(1), name+"-max-ms")
	}
}

// waits are the runnable-to-running waits of a trace's goroutines, by why
// they had blocked.
type waits struct {
	// socket: blocked reading a socket, made runnable by the netpoller
	// (no goroutine unblocked it).
	socket []time.Duration
	// hop2: blocked in internal/redispipe outside a lane (a caller
	// awaiting its reply), made runnable by another goroutine (the lane).
	hop2 []time.Duration
}

func wakeWaits(r io.Reader) (waits, error) {
	tr, err := exptrace.NewReader(r)
	if err != nil {
		return waits{}, err
	}
	type pending struct {
		at   exptrace.Time
		kind int // 0: not counted, 1: socket, 2: hop2
	}
	blocked := map[exptrace.GoID]string{} // the stack it blocked with, as "f;g;…"
	runnable := map[exptrace.GoID]pending{}
	var w waits
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			return w, nil
		}
		if err != nil {
			return waits{}, err
		}
		if ev.Kind() != exptrace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != exptrace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch {
		case to == exptrace.GoWaiting:
			var sb strings.Builder
			for f := range st.Stack.Frames() {
				sb.WriteString(f.Func)
				sb.WriteByte(';')
			}
			blocked[id] = sb.String()
		case from == exptrace.GoWaiting && to == exptrace.GoRunnable:
			s, kind := blocked[id], 0
			byNetpoll := ev.Goroutine() == exptrace.NoGoroutine
			switch {
			case byNetpoll && strings.Contains(s, "internal/poll."):
				kind = 1
			case !byNetpoll && strings.Contains(s, "redispipe.") && !strings.Contains(s, "redispipe.(*Pipe).lane"):
				kind = 2
			}
			runnable[id] = pending{ev.Time(), kind}
		case from == exptrace.GoRunnable && to == exptrace.GoRunning:
			p, ok := runnable[id]
			delete(runnable, id)
			d := time.Duration(ev.Time() - p.at)
			switch {
			case !ok:
			case p.kind == 1:
				w.socket = append(w.socket, d)
			case p.kind == 2:
				w.hop2 = append(w.hop2, d)
			}
		}
	}
}
