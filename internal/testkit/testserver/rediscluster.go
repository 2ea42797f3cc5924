package testserver

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// RedisCLIBinary is where Debian's redis-tools package installs redis-cli,
// which creates a Cluster from its nodes.
const RedisCLIBinary = "/usr/bin/redis-cli"

// RedisCluster is a Redis Cluster of three primaries, each with one
// replica, on private loopback ports and directories. Each node is a
// Server: it can be killed, paused and restarted on its port and data
// directory (nodes.conf there keeps its identity, so it rejoins).
type RedisCluster struct {
	// Nodes are the six nodes in the order redis-cli was given them: it
	// makes the first three the primaries and the last three their
	// replicas. After a failover, ask the cluster (Roles) who is what.
	Nodes []*Server
}

// RedisClusterNodeTimeout is the cluster-node-timeout the test Cluster runs
// with: a primary unreachable this long is failed over by its replica.
const RedisClusterNodeTimeout = 1500 * time.Millisecond

// StartRedisCluster starts six cluster-enabled redis-servers (no
// persistence unless extra says otherwise; extra is appended to each
// node's command line), joins them with redis-cli --cluster create
// --cluster-replicas 1 and waits until every node reports cluster_state:ok.
// A replica may fail over whatever its data's age
// (cluster-replica-validity-factor 0), so fault tests get a failover
// after RedisClusterNodeTimeout.
func StartRedisCluster(t TB, extra ...string) *RedisCluster {
	t.Helper()
	cli := lookRedisCLI(t)
	bin := RedisBinary
	if _, err := exec.LookPath(bin); err != nil {
		bin = "redis-server"
	}
	rc := &RedisCluster{}
	for i := 0; i < 6; i++ {
		rc.Nodes = append(rc.Nodes, Start(t, Spec{
			Name:   fmt.Sprintf("redis-cluster-%d", i),
			Binary: bin,
			Args: func(port int, dir string) []string {
				args := []string{
					"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
					"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
					"--cluster-node-timeout", fmt.Sprint(RedisClusterNodeTimeout.Milliseconds()),
					"--cluster-replica-validity-factor", "0",
					"--save", "", "--appendonly", "no", "--dir", dir,
					"--daemonize", "no", "--protected-mode", "no",
					"--repl-diskless-sync-delay", "0",
				}
				return append(args, extra...)
			},
			Ready: redisPing,
		}))
	}
	args := []string{"--cluster", "create"}
	for _, n := range rc.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	rc.WaitOK(t, 60*time.Second)
	// cluster_state:ok can come before the replicas have attached: wait
	// until every primary has its replica in sync, so that tests of WAIT
	// and failover start from the topology they describe.
	deadline := time.Now().Add(60 * time.Second)
	for {
		synced := 0
		for _, n := range rc.Nodes {
			info, err := RedisCommand(n.Addr(), "INFO", "replication")
			if err == nil && strings.Contains(info, "role:master") && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
				synced++
			}
		}
		if synced == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: %d of 3 cluster primaries have a replica in sync after 60s", synced)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rc
}

// Addrs returns every node's address (seeds for a Cluster client).
func (rc *RedisCluster) Addrs() []string {
	var a []string
	for _, n := range rc.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// WaitOK waits until every running node reports cluster_state:ok and
// agrees that every slot is served.
func (rc *RedisCluster) WaitOK(t TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		bad := ""
		for _, n := range rc.Nodes {
			if n.PID() == 0 {
				continue
			}
			info, err := RedisCommand(n.Addr(), "CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				bad = fmt.Sprintf("%s: %v %q", n.Addr(), err, firstLines(info, 3))
				break
			}
			if err := replicasOnline(n.Addr()); err != nil {
				bad = err.Error()
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: cluster not ok within %v: %s", within, bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicasOnline reports an error unless every replica the node at addr
// lists (if it is a primary) has finished its initial sync.
func replicasOnline(addr string) error {
	info, err := RedisCommand(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=") && !strings.Contains(line, "state=online") {
			return fmt.Errorf("%s: replica not in sync yet: %s", addr, line)
		}
		if strings.HasPrefix(line, "master_link_status:") && line != "master_link_status:up" {
			return fmt.Errorf("%s: %s", addr, line)
		}
	}
	return nil
}

// Role returns what node says it is: "master" or "slave" (ROLE's first
// element), or an error if it does not answer.
func Role(addr string) (string, error) {
	out, err := RedisCommand(addr, "ROLE")
	if err != nil {
		return "", err
	}
	return firstLines(out, 1), nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " ")
}

// RedisCommand runs one command on the server at addr with redis-cli and
// returns its output (a tests' tool for administrative commands: CLUSTER
// FAILOVER, SENTINEL FAILOVER, INFO).
func RedisCommand(addr string, args ...string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	cli := RedisCLIBinary
	if _, err := exec.LookPath(cli); err != nil {
		cli = "redis-cli"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	if s := string(out); strings.HasPrefix(s, "ERR") || strings.HasPrefix(s, "(error)") {
		return s, fmt.Errorf("redis-cli %s: %s", strings.Join(args, " "), strings.TrimSpace(s))
	}
	return string(out), nil
}

func lookRedisCLI(t TB) string {
	t.Helper()
	for _, c := range []string{RedisCLIBinary, "redis-cli"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("testserver: redis-cli not found (CI=true: a missing server fails the run); install redis-tools")
	}
	t.Skipf("testserver: redis-cli not found; install redis-tools")
	return ""
}
