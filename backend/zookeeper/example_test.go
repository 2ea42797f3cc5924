package zookeeper_test

import (
	"context"
	"log"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/zookeeper"
)

// Leader election on ZooKeeper, as Spring Cloud / Curator users know it:
// every instance campaigns for the role; the leader runs the consumer until
// its term ends (its session or lease lost, or ctx cancelled), and another
// instance takes over with a greater fencing token. The session timeout is
// negotiated by the server; SessionTimeout reports what was granted, and
// lock TTLs are capped by it.
func ExampleOpen_leaderElection() {
	b, err := zookeeper.Open(context.Background(), "zk://zk1:2181,zk2:2181,zk3:2181/myapp?session_timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	log.Printf("session timeout granted: %v", b.SessionTimeout())
	el, err := leasehold.NewElector(b, "queue-consumer", leasehold.Callbacks{
		OnElected:   func(token leasehold.Token) { log.Printf("leading, term token %d", token) },
		OnDemoted:   func() { log.Print("no longer leading") },
		OnNewLeader: func(id string) { log.Printf("leader is %s", id) },
	}, leasehold.WithInstance("consumer-1"), leasehold.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = el.Run(ctx, func(leaderCtx context.Context) error {
		<-leaderCtx.Done() // consume until the term ends
		return nil
	})
	log.Print(err)
}

// New connects with go-zookeeper options of the caller's (here a dialer
// with a keep-alive); the backend owns the session it makes and Close ends
// it, which deletes every lock node it holds.
func ExampleNew() {
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Second}
		return d.Dial(network, addr)
	}
	b, err := zookeeper.New(context.Background(), []string{"zk1:2181", "zk2:2181", "zk3:2181"},
		zookeeper.WithPrefix("/myapp"), zookeeper.WithSessionTimeout(10*time.Second),
		zookeeper.WithConnOptions(zk.WithDialer(dialer)))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	l, err := leasehold.NewLocker(b, leasehold.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	lock, err := l.Acquire(context.Background(), "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())
	log.Printf("holding reports with token %d", lock.Token())
}
