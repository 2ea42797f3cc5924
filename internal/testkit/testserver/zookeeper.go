package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ZooKeeperJar is where Debian's zookeeper package installs the server; its
// manifest's Class-Path names the jars it needs.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeper timing for tests: tickTime 200 ms, sessions negotiated between
// minSessionTimeout 1 s and maxSessionTimeout 60 s (extra lines of zoo.cfg
// passed to ZooKeeper override these).
const (
	zkTickMS       = 200
	zkMinSessionMS = 1000
	zkMaxSessionMS = 60000
)

// ZooKeeper starts a standalone ZooKeeper server (java directly, with the
// classpath Debian's zkServer.sh builds, so that the Server's PID is the
// JVM's and Kill, Pause and Resume reach it). extra are zoo.cfg lines
// ("key=value"). Its data directory survives Restart. Ready when the four
// letter word srvr says the server is serving (ruok's imok only says the
// port is bound: sessions can still be refused while the database loads).
func ZooKeeper(t TB, extra ...string) *Server {
	t.Helper()
	java := zkJava(t)
	return Start(t, Spec{
		Name:   "zookeeper",
		Binary: java,
		Args: func(port int, dir string) []string {
			return zkArgs(t, port, dir, extra)
		},
		Ready:        zkServing,
		StartTimeout: 60 * time.Second,
	})
}

// zkJava returns the java binary, skipping the test (failing it when
// CI=true) if the server's jar is missing.
func zkJava(t TB) string {
	t.Helper()
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testserver: zookeeper jar %s not found (CI=true: a missing server fails the run; install Debian's zookeeper): %v", ZooKeeperJar, err)
		}
		t.Skipf("testserver: zookeeper jar %s not found: %v", ZooKeeperJar, err)
	}
	java := "/usr/bin/java"
	if _, err := exec.LookPath(java); err != nil {
		java = "java"
	}
	return java
}

// zkArgs writes dir/zoo.cfg (the test timing, then extra lines) and
// returns the JVM's command line.
func zkArgs(t TB, port int, dir string, extra []string) []string {
	cfg := filepath.Join(dir, "zoo.cfg")
	lines := []string{
		fmt.Sprintf("tickTime=%d", zkTickMS),
		"dataDir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("clientPort=%d", port),
		"clientPortAddress=127.0.0.1",
		fmt.Sprintf("minSessionTimeout=%d", zkMinSessionMS),
		fmt.Sprintf("maxSessionTimeout=%d", zkMaxSessionMS),
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr",
		"forceSync=yes",
		"maxClientCnxns=0", // no per-host cap (60 by default): benchmarks open many sessions from 127.0.0.1
	}
	lines = append(lines, extra...)
	if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("testserver: write %s: %v", cfg, err)
	}
	return []string{
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir=" + dir, "-Dzookeeper.admin.enableServer=false",
		"-cp", "/etc/zookeeper/conf:" + ZooKeeperJar,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg,
	}
}

// zkServing sends the four letter word srvr and expects a Mode line,
// which a server that is not yet serving requests does not give.
func zkServing(ctx context.Context, addr string) error {
	b, err := zk4lw(ctx, addr, "srvr")
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\nMode: ") {
		return fmt.Errorf("srvr answered %q", b)
	}
	return nil
}

// zkRuok sends the four letter word ruok and expects imok.
func zkRuok(ctx context.Context, addr string) error {
	b, err := zk4lw(ctx, addr, "ruok")
	if err != nil {
		return err
	}
	if string(b) != "imok" {
		return fmt.Errorf("ruok answered %q", b)
	}
	return nil
}

// zk4lw sends a four letter word and returns the whole answer.
func zk4lw(ctx context.Context, addr, word string) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte(word)); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}
