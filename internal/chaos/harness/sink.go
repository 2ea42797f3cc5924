package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/history"
)

// Sink is the fenced sink: a store that keeps, per key, the highest token it
// has seen and rejects a write whose token is lower. It runs in the
// harness's process and serves the workers over HTTP on a unix socket. Every
// write, accepted or not, is appended to its log (a history file, Sink
// "fenced"), which is what the checker counts duplicates from.
type Sink struct {
	mu      sync.Mutex
	highest map[string]uint64
	log     *history.Writer
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}
}

// SinkWrite is one write to the sink.
type SinkWrite struct {
	Key     string `json:"key"`
	Token   uint64 `json:"token,string"`
	Writer  string `json:"writer"` // worker and owner
	Attempt int    `json:"attempt,omitempty"`
}

// SinkReply is the sink's answer.
type SinkReply struct {
	Accepted bool   `json:"accepted"`
	Highest  uint64 `json:"highest,string"`
}

// StartSink serves a fenced sink on the unix socket at sock, logging writes
// to logPath.
func StartSink(sock, logPath string) (*Sink, error) {
	w, err := history.Create(logPath, "sink")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("fenced sink: %w", err)
	}
	s := &Sink{highest: map[string]uint64{}, log: w, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", s.serveWrite)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	return s, nil
}

// Write applies one write: accepted iff its token is at least the highest
// seen for the key.
func (s *Sink) Write(w SinkWrite) SinkReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.highest[w.Key]
	ok := w.Token >= h
	if ok {
		s.highest[w.Key] = w.Token
		h = w.Token
	}
	res := history.Rejected
	if ok {
		res = history.Accepted
	}
	s.log.Write(history.Event{Phase: history.Point, Kind: history.Effect, Sink: "fenced", Key: w.Key, Token: w.Token,
		Owner: w.Writer, Attempt: w.Attempt, Result: res, HeldToken: h})
	return SinkReply{Accepted: ok, Highest: h}
}

func (s *Sink) serveWrite(rw http.ResponseWriter, r *http.Request) {
	var w SinkWrite
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 4096)).Decode(&w); err != nil || w.Key == "" {
		http.Error(rw, "bad write", http.StatusBadRequest)
		return
	}
	_ = json.NewEncoder(rw).Encode(s.Write(w))
}

// Close stops serving and closes the log.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
	return s.log.Close()
}

// sinkClient writes to a Sink from a worker.
type sinkClient struct{ hc *http.Client }

func newSinkClient(sock string) *sinkClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &sinkClient{hc: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

var errSink = errors.New("fenced sink")

func (c *sinkClient) write(ctx context.Context, w SinkWrite) (SinkReply, error) {
	b, _ := json.Marshal(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sink/write", bytes.NewReader(b))
	if err != nil {
		return SinkReply{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return SinkReply{}, fmt.Errorf("%w: %v", errSink, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return SinkReply{}, fmt.Errorf("%w: status %s", errSink, resp.Status)
	}
	var r SinkReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return SinkReply{}, fmt.Errorf("%w: %v", errSink, err)
	}
	return r, nil
}
