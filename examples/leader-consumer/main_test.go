package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// startNATS starts a private nats-server with JetStream on a free port.
func startNATS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found: %v", err)
		}
		t.Skipf("nats-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if !eventually.Within(10*time.Second, func() bool {
		var nc *nats.Conn
		if nc, err = nats.Connect(url); err != nil {
			return false
		}
		nc.Close()
		return true
	}) {
		t.Fatalf("nats-server on %s not ready: %v", url, err)
	}
	return url
}

func readOutbox(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sent := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sent[strings.Fields(sc.Text())[0]]++
	}
	return sent
}

// TestOnlyTheLeaderConsumesAndEachNotificationIsSentOnce: two consumers,
// 200 notifications; the leader is stopped halfway (its messages in flight
// are redelivered to the new leader); every notification is in the outbox
// exactly once.
func TestOnlyTheLeaderConsumesAndEachNotificationIsSentOnce(t *testing.T) {
	url := startNATS(t)
	dir := t.TempDir()
	b, err := sqlite.Open(context.Background(), filepath.Join(dir, "lh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	outbox := filepath.Join(dir, "outbox")
	opts := func(name string) Options {
		return Options{NATS: url, Stream: "NOTIFY", Subject: "notify.>", Instance: name, Outbox: outbox,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopA()
	defer stopB()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- Run(ctxA, b, opts("a")) }()
	role := leasehold.RoleKey("default", "notifications/consumer")
	waitLeader := func(want string) {
		var (
			l   backend.Lease
			err error
		)
		if !eventually.Within(20*time.Second, func() bool {
			l, err = b.Get(context.Background(), role)
			return err == nil && l.Owner.Instance == want
		}) {
			t.Fatalf("%s never led (holder %+v, %v)", want, l, err)
		}
	}
	waitLeader("a")
	go func() { doneB <- Run(ctxB, b, opts("b")) }()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// The stream exists once a consumer created it.
	eventually.True(t, 20*time.Second, "stream created", func() bool {
		_, err := js.Stream(ctx, "NOTIFY")
		return err == nil
	})
	const n = 200
	for i := range n {
		if _, err := js.Publish(ctx, "notify.mail", []byte(fmt.Sprint("hello ", i)), jetstream.WithMsgID(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			stopA() // the leader goes away mid-stream; b must take over
		}
	}
	if !eventually.Within(60*time.Second, func() bool { return len(readOutbox(t, outbox)) >= n }) {
		t.Fatalf("only %d of %d notifications sent", len(readOutbox(t, outbox)), n)
	}
	waitLeader("b")
	stopB()
	<-doneA
	<-doneB
	sent := readOutbox(t, outbox)
	for id, c := range sent {
		if c != 1 {
			t.Fatalf("notification %s sent %d times", id, c)
		}
	}
	if len(sent) != n {
		t.Fatalf("%d notifications sent, want %d", len(sent), n)
	}
}
