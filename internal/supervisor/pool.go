package supervisor

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Pool keeps one supervisor spawned ahead of the next command, so that a
// run's start does not wait for a leasehold process to initialise: Start
// takes the spare and spawns the next one in the background. Its spares'
// output goes to the Stdout and Stderr of the Start that takes them. An
// idle pool holds no process until its first Start.
type Pool struct {
	exe       string
	waitDelay time.Duration

	mu     sync.Mutex
	spare  *pooled
	closed bool
}

// pooled is a spare with the writers its output is switched to.
type pooled struct {
	sp          *Spare
	stdout, err *switchWriter
}

// NewPool returns a pool of supervisors running exe ("" for this program)
// whose output pipes have waitDelay (exec.Cmd.WaitDelay).
func NewPool(exe string, waitDelay time.Duration) *Pool {
	return &Pool{exe: exe, waitDelay: waitDelay}
}

// Start runs spec under the pool's spare supervisor (or a new one if none
// is ready) as the package's Start does; o.Exe, o.Stdin and o.WaitDelay
// are the pool's (the command's stdin is empty).
func (p *Pool) Start(spec Spec, o Options) (*Handle, error) {
	p.mu.Lock()
	s := p.spare
	p.spare = nil
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: pool closed", ErrSupervisor)
	}
	if s == nil {
		var err error
		if s, err = p.spawn(); err != nil {
			return nil, err
		}
	}
	go p.refill()
	s.stdout.set(o.Stdout)
	s.err.set(o.Stderr)
	return s.sp.Start(spec, o.Deadline, o.MaxAhead)
}

func (p *Pool) spawn() (*pooled, error) {
	s := &pooled{stdout: &switchWriter{}, err: &switchWriter{}}
	sp, err := Spawn(Options{Exe: p.exe, Stdout: s.stdout, Stderr: s.err, WaitDelay: p.waitDelay})
	if err != nil {
		return nil, err
	}
	s.sp = sp
	return s, nil
}

// refill spawns a spare if there is none.
func (p *Pool) refill() {
	s, err := p.spawn()
	if err != nil {
		return // the next Start spawns its own
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.spare != nil {
		s.sp.Close()
		return
	}
	p.spare = s
}

// Close ends the spare; Start fails after it.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.spare != nil {
		p.spare.sp.Close()
		p.spare = nil
	}
}

// switchWriter writes to the writer set last (nothing before one is set).
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w == nil {
		return len(b), nil
	}
	return w.Write(b)
}
