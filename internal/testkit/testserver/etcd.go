package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EtcdBinary is where Debian's etcd-server package installs the server.
const EtcdBinary = "/usr/bin/etcd"

// Etcd timing for tests: a 100 ms heartbeat and a 600 ms election timeout
// make the server's minimum lease TTL 0.9 s (1.5 × election timeout), so a
// 1 s lease is granted as 1 s instead of etcd's default floor of 2 s.
const (
	etcdHeartbeatMS = "100"
	etcdElectionMS  = "600"
)

func etcdBinary() string {
	if _, err := exec.LookPath(EtcdBinary); err == nil {
		return EtcdBinary
	}
	return "etcd" // elsewhere in PATH (or missing: Start skips or fails)
}

// peerPort returns the peer port recorded in dir, picking and recording a
// free one the first time, so that a restarted member keeps its peer URL.
func peerPort(t TB, dir string) int {
	f := filepath.Join(dir, "peer-port")
	if b, err := os.ReadFile(f); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return p
		}
	}
	p := FreePort(t)
	if err := os.WriteFile(f, []byte(strconv.Itoa(p)), 0o600); err != nil {
		t.Fatalf("testserver: record etcd peer port: %v", err)
	}
	return p
}

func etcdArgs(name string, port int, dataDir, peerURL, cluster string, extra []string) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--name", name, "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", cluster, "--initial-cluster-state", "new",
		"--initial-cluster-token", "leasehold-test",
		"--heartbeat-interval", etcdHeartbeatMS, "--election-timeout", etcdElectionMS,
		"--log-level", "warn", "--logger", "zap",
	}
	return append(args, extra...)
}

// Etcd starts a single-member etcd server (data in its Dir()/data) on a
// loopback port. Its data survives Restart, Kill and Start, so revisions —
// and the fencing tokens built on them — continue. extra arguments are
// appended to the command line.
func Etcd(t TB, extra ...string) *Server {
	t.Helper()
	return Start(t, Spec{
		Name:   "etcd",
		Binary: etcdBinary(),
		Args: func(port int, dir string) []string {
			peer := "http://127.0.0.1:" + strconv.Itoa(peerPort(t, dir))
			return etcdArgs("n0", port, filepath.Join(dir, "data"), peer, "n0="+peer, extra)
		},
		Ready:        etcdHealthy,
		StartTimeout: 30 * time.Second,
	})
}

// etcdHealthy asks the server's /health endpoint, which answers true once
// the member has a leader and can serve a linearizable read.
func etcdHealthy(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"health":"true"`) {
		return fmt.Errorf("/health answered %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// listening reports whether something accepts TCP connections at addr. A
// cluster member accepts connections before it can serve (it waits for a
// quorum), so members are started on this and the cluster is then waited on
// as a whole.
func listening(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// EtcdCluster is a 3-member etcd cluster on loopback ports.
type EtcdCluster struct {
	// Members are the member processes; Members[i] is named "m<i>".
	Members []*Server
}

// EtcdCluster3 starts a 3-member etcd cluster and waits until every member
// reports healthy (a leader is elected and reads are served).
func EtcdCluster3(t TB, extra ...string) *EtcdCluster {
	t.Helper()
	const n = 3
	peers := make([]string, n)
	var parts []string
	for i := range n {
		peers[i] = "http://127.0.0.1:" + strconv.Itoa(FreePort(t))
		parts = append(parts, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	cluster := strings.Join(parts, ",")
	c := &EtcdCluster{}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		c.Members = append(c.Members, Start(t, Spec{
			Name:   "etcd-" + name,
			Binary: etcdBinary(),
			Args: func(port int, dir string) []string {
				return etcdArgs(name, port, filepath.Join(dir, "data"), peers[i], cluster, extra)
			},
			Ready:        listening,
			StartTimeout: 30 * time.Second,
		}))
	}
	c.WaitHealthy(t, 60*time.Second)
	return c
}

// Endpoints returns the members' client addresses ("127.0.0.1:port").
func (c *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Addr())
	}
	return out
}

// WaitHealthy waits until every running member's /health answers true.
func (c *EtcdCluster) WaitHealthy(t TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, m := range c.Members {
		if m.PID() == 0 {
			continue
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := etcdHealthy(ctx, m.Addr())
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testserver: etcd member %s not healthy within %v: %v", m.Addr(), within, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// EtcdTLS starts a single-member etcd server that serves clients over TLS
// only, with the server certificate certFile/keyFile and client
// certificates required and verified against caFile. Ready means the TLS
// port accepts connections; the caller's client waits for the rest.
func EtcdTLS(t TB, caFile, certFile, keyFile string) *Server {
	t.Helper()
	return Start(t, Spec{
		Name:   "etcd-tls",
		Binary: etcdBinary(),
		Args: func(port int, dir string) []string {
			peer := "http://127.0.0.1:" + strconv.Itoa(peerPort(t, dir))
			args := etcdArgs("n0", port, filepath.Join(dir, "data"), peer, "n0="+peer, []string{
				"--cert-file", certFile, "--key-file", keyFile, "--trusted-ca-file", caFile, "--client-cert-auth",
			})
			for i, a := range args {
				if a == "--listen-client-urls" || a == "--advertise-client-urls" {
					args[i+1] = "https://127.0.0.1:" + strconv.Itoa(port)
				}
			}
			return args
		},
		Ready:        listening,
		StartTimeout: 30 * time.Second,
	})
}
