package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/chaos"
)

// ZooKeeperEnsemble is a 3-server ZooKeeper ensemble on loopback ports.
// Every link between two servers (the quorum port a follower connects to,
// and the election ports) goes through a chaos proxy, so a test can cut a
// server off from another one while both keep serving their clients.
type ZooKeeperEnsemble struct {
	Members []*Server
	// links[i][j] are the proxies server i reaches server j through
	// (quorum, election).
	links [][][2]*chaos.Proxy
}

// ZooKeeperEnsemble3 starts a 3-server ensemble (the test timing of
// ZooKeeper: tickTime 200 ms; a follower gives up a leader it has not heard
// from for syncLimit = 5 ticks) and waits until each member serves. extra
// are zoo.cfg lines for every member.
func ZooKeeperEnsemble3(t TB, extra ...string) *ZooKeeperEnsemble {
	t.Helper()
	java := zkJava(t)
	const n = 3
	quorum, election := make([]int, n), make([]int, n)
	for i := range n {
		quorum[i], election[i] = FreePort(t), FreePort(t)
	}
	e := &ZooKeeperEnsemble{links: make([][][2]*chaos.Proxy, n)}
	for i := range n {
		e.links[i] = make([][2]*chaos.Proxy, n)
		for j := range n {
			if i == j {
				continue
			}
			for k, port := range []int{quorum[j], election[j]} {
				p, err := chaos.New("127.0.0.1:" + strconv.Itoa(port))
				if err != nil {
					t.Fatalf("testserver: zookeeper ensemble link proxy: %v", err)
				}
				t.Cleanup(func() { p.Close() })
				e.links[i][j][k] = p
			}
		}
	}
	for i := range n {
		// Server i's view: its own ports, and the proxies to the others.
		lines := []string{"initLimit=10", "syncLimit=5", "standaloneEnabled=false", "reconfigEnabled=false"}
		for j := range n {
			q, el := quorum[j], election[j]
			if j != i {
				q, el = proxyPort(e.links[i][j][0]), proxyPort(e.links[i][j][1])
			}
			lines = append(lines, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", j+1, q, el))
		}
		lines = append(lines, extra...)
		id := i + 1
		e.Members = append(e.Members, Start(t, Spec{
			Name:   fmt.Sprintf("zookeeper-%d", id),
			Binary: java,
			Args: func(port int, dir string) []string {
				data := filepath.Join(dir, "data")
				if err := os.MkdirAll(data, 0o700); err != nil {
					t.Fatalf("testserver: %v", err)
				}
				if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o600); err != nil {
					t.Fatalf("testserver: write myid: %v", err)
				}
				return zkArgs(t, port, dir, lines)
			},
			Ready:        zkRuok, // the process answers; serving needs a quorum
			StartTimeout: 60 * time.Second,
		}))
	}
	e.WaitServing(t, 60*time.Second)
	return e
}

// Addrs are the members' client addresses.
func (e *ZooKeeperEnsemble) Addrs() []string {
	var out []string
	for _, m := range e.Members {
		out = append(out, m.Addr())
	}
	return out
}

// WaitServing waits until every running member serves clients (srvr
// reports its mode) and returns the index of the leader.
func (e *ZooKeeperEnsemble) WaitServing(t TB, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	leader := -1
	for i, m := range e.Members {
		if m.PID() == 0 {
			continue
		}
		for {
			mode, err := ZooKeeperMode(m.Addr())
			if err == nil {
				if mode == "leader" {
					leader = i
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testserver: zookeeper member %s not serving within %v: %v", m.Addr(), within, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return leader
}

// Cut cuts (on) or restores (off) the links between servers i and j, in
// both directions: bytes are discarded, connections stay open, so each
// notices only by its timeouts. Restoring also closes the links'
// connections, so that the servers reconnect at once.
func (e *ZooKeeperEnsemble) Cut(i, j int, on bool) {
	for _, pair := range [][2]int{{i, j}, {j, i}} {
		for _, p := range e.links[pair[0]][pair[1]] {
			p.SetDrop(on)
			if !on {
				p.CloseConns()
			}
		}
	}
}

// ZooKeeperMode asks the server at addr for its mode with the four letter
// word srvr: "leader", "follower" or "standalone"; an error if it does not
// serve clients (no quorum).
func ZooKeeperMode(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", fmt.Errorf("srvr at %s answered without a mode: %q", addr, strings.TrimSpace(string(b)))
}

func proxyPort(p *chaos.Proxy) int {
	_, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	return n
}
