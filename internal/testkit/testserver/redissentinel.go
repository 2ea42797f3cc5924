package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// RedisSentinelMaster is the master name the test Sentinels monitor.
const RedisSentinelMaster = "leasehold"

// RedisSentinelDownAfter is the Sentinels' down-after-milliseconds: a
// primary silent this long is failed over.
const RedisSentinelDownAfter = 1000 * time.Millisecond

// RedisSentinelSet is one primary, two replicas and three Sentinels
// (quorum 2) on private loopback ports and directories. Every member is a
// Server: killable, pausable and restartable on its port and directory.
type RedisSentinelSet struct {
	// Primary is the primary at start; after a failover ask the Sentinels
	// (Master) who is primary now.
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Server
}

// StartRedisSentinel starts the set and waits until every Sentinel sees
// both replicas and the other two Sentinels. extra is appended to each
// data node's command line (not the Sentinels').
func StartRedisSentinel(t TB, extra ...string) *RedisSentinelSet {
	t.Helper()
	bin := RedisBinary
	if _, err := exec.LookPath(bin); err != nil {
		bin = "redis-server"
	}
	data := func(name string, more ...string) Spec {
		return Spec{
			Name:   name,
			Binary: bin,
			Args: func(port int, dir string) []string {
				args := []string{
					"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
					"--save", "", "--appendonly", "no", "--dir", dir,
					"--daemonize", "no", "--protected-mode", "no",
					"--repl-diskless-sync-delay", "0",
				}
				args = append(args, more...)
				return append(args, extra...)
			},
			Ready: redisPing,
		}
	}
	s := &RedisSentinelSet{}
	s.Primary = Start(t, data("redis-primary"))
	for i := 0; i < 2; i++ {
		s.Replicas = append(s.Replicas, Start(t, data(fmt.Sprintf("redis-replica-%d", i),
			"--replicaof", "127.0.0.1", fmt.Sprint(s.Primary.Port()))))
	}
	// redis-server --sentinel is the Sentinel (Debian's redis-sentinel
	// package ships the same program with its service files).
	sentinelBin := bin
	for i := 0; i < 3; i++ {
		primaryPort := s.Primary.Port()
		s.Sentinels = append(s.Sentinels, Start(t, Spec{
			Name:   fmt.Sprintf("redis-sentinel-%d", i),
			Binary: sentinelBin,
			Args: func(port int, dir string) []string {
				conf := filepath.Join(dir, "sentinel.conf")
				if _, err := os.Stat(conf); err != nil {
					// Sentinel rewrites its file as it learns; a restart
					// keeps what it learnt.
					body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
						"sentinel monitor %s 127.0.0.1 %d 2\n"+
						"sentinel down-after-milliseconds %[3]s %[5]d\n"+
						"sentinel failover-timeout %[3]s 10000\n"+
						"sentinel parallel-syncs %[3]s 1\n",
						port, dir, RedisSentinelMaster, primaryPort, RedisSentinelDownAfter.Milliseconds())
					_ = os.WriteFile(conf, []byte(body), 0o600)
				}
				return []string{conf, "--sentinel"}
			},
			Ready: redisPing,
		}))
	}
	s.WaitSettled(t, 60*time.Second)
	return s
}

// SentinelAddrs returns the Sentinels' addresses.
func (s *RedisSentinelSet) SentinelAddrs() []string {
	var a []string
	for _, n := range s.Sentinels {
		a = append(a, n.Addr())
	}
	return a
}

// Master returns the primary's address as the first answering Sentinel
// names it.
func (s *RedisSentinelSet) Master() (string, error) {
	var last error
	for _, n := range s.Sentinels {
		if n.PID() == 0 {
			continue
		}
		out, err := RedisCommand(n.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", RedisSentinelMaster)
		if err != nil {
			last = err
			continue
		}
		f := strings.Fields(out)
		if len(f) == 2 {
			return f[0] + ":" + f[1], nil
		}
		last = fmt.Errorf("sentinel %s answered %q", n.Addr(), out)
	}
	return "", last
}

// Node returns the data node (primary or replica) listening on addr.
func (s *RedisSentinelSet) Node(addr string) *Server {
	for _, n := range append([]*Server{s.Primary}, s.Replicas...) {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// WaitSettled waits until every running Sentinel knows two replicas and
// two other Sentinels of the master, and the master has both replicas
// online.
func (s *RedisSentinelSet) WaitSettled(t TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		bad := ""
		for _, n := range s.Sentinels {
			if n.PID() == 0 {
				continue
			}
			out, err := RedisCommand(n.Addr(), "SENTINEL", "MASTER", RedisSentinelMaster)
			if err != nil {
				bad = err.Error()
				break
			}
			f := strings.Fields(out)
			kv := map[string]string{}
			for i := 0; i+1 < len(f); i += 2 {
				kv[f[i]] = f[i+1]
			}
			if kv["num-slaves"] != "2" || kv["num-other-sentinels"] != "2" || kv["flags"] != "master" {
				bad = fmt.Sprintf("sentinel %s: slaves %s, other sentinels %s, flags %s", n.Addr(), kv["num-slaves"], kv["num-other-sentinels"], kv["flags"])
				break
			}
		}
		if bad == "" {
			if m, err := s.Master(); err == nil {
				info, err := RedisCommand(m, "INFO", "replication")
				if err != nil || !strings.Contains(info, "connected_slaves:2") {
					bad = fmt.Sprintf("master %s: %v %s", m, err, firstLines(info, 4))
				} else if err := replicasOnline(m); err != nil {
					bad = err.Error()
				}
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: sentinel set not settled within %v: %s", within, bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
