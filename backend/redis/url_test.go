package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestParseURLForms: each form gives its kind of client, with TLS 1.2 at
// least under rediss, passwords where go-redis puts them and the
// leasehold parameters taken out.
func TestParseURLForms(t *testing.T) {
	for _, c := range []struct {
		url, kind string
		check     func(t *testing.T, d *redis.Deployment)
	}{
		{"redis://u:pw@h1:7000/2?prefix=p:", "node", func(t *testing.T, d *redis.Deployment) {
			if d.Node.Addr != "h1:7000" || d.Node.DB != 2 || d.Node.Password != "pw" || d.Node.TLSConfig != nil {
				t.Errorf("node options %+v", d.Node)
			}
		}},
		{"rediss://u:pw@h1:7000?addr=h2:7001&addr=h3:7002&wait_replicas=1&wait_timeout=50ms", "cluster", func(t *testing.T, d *redis.Deployment) {
			if strings.Join(d.Cluster.Addrs, ",") != "h1:7000,h2:7001,h3:7002" || d.Cluster.Password != "pw" ||
				d.Cluster.TLSConfig == nil || d.Cluster.TLSConfig.MinVersion < tls.VersionTLS12 || !d.Cluster.ContextTimeoutEnabled {
				t.Errorf("cluster options %+v", d.Cluster)
			}
		}},
		{"redis://h1:7000?cluster=true", "cluster", nil},
		{"rediss://su:spw@s1:26379/1?master_name=m&addr=s2:26379&username=app&password=apw", "sentinel", func(t *testing.T, d *redis.Deployment) {
			o := d.Sentinel
			if o.MasterName != "m" || strings.Join(o.SentinelAddrs, ",") != "s1:26379,s2:26379" || o.SentinelPassword != "spw" ||
				o.SentinelUsername != "su" || o.Username != "app" || o.Password != "apw" || o.DB != 1 ||
				o.TLSConfig == nil || o.TLSConfig.MinVersion < tls.VersionTLS12 {
				t.Errorf("sentinel options %+v", o)
			}
		}},
	} {
		d, err := redis.ParseURL(c.url)
		if err != nil {
			t.Fatalf("ParseURL(%s): %v", c.url, err)
		}
		if d.Kind != c.kind {
			t.Errorf("ParseURL(%s): kind %s, want %s", c.url, d.Kind, c.kind)
		}
		if strings.Contains(d.Redacted, "pw@") {
			t.Errorf("Redacted %q shows a password", d.Redacted)
		}
		if c.check != nil {
			c.check(t, d)
		}
	}
}

// TestParseURLNamesThePart: a bad URL is ErrInvalid, names the part at
// fault and never shows a password.
func TestParseURLNamesThePart(t *testing.T) {
	for _, c := range []struct{ url, part string }{
		{"http://u:s3cret@h:1", "scheme"},
		{"redis://u:s3cret@", "no host"},
		{"redis://u:s3cret@h:99999", "port"},
		{"redis://u:s3cret@h:1?addr=h2:x", `addr "h2:x"`},
		{"redis://u:s3cret@h:1?addr=:7000", "addr"},
		{"redis://u:s3cret@h:1?master_name=", "master_name is empty"},
		{"redis://u:s3cret@h:1?master_name=m&cluster=true", "not both"},
		{"redis://u:s3cret@h:1?cluster=maybe", "cluster"},
		{"redis://u:s3cret@h:1/3?addr=h2:2", "database 0 only"},
		{"redis://u:s3cret@h:1?wait_replicas=-1", "wait_replicas"},
		{"redis://u:s3cret@h:1?wait_replicas=1&wait_timeout=soon", "wait_timeout"},
		{"redis://u:s3cret@h:1?wait_timeout=1s", "wait_timeout without"},
		{"redis://u:s3cret@h:1?addr=h2:2&bogus=1", "bogus"},
		{"redis://u:s3cret@h:1?master_name=m&bogus=1", "bogus"},
		{"redis://u:s3cret@h:1?master_name=m&password=s3cret&bogus=1", "bogus"},
		{"redis://u:s3cret@h:1/x", "cluster"}, // go-redis's own message names the db
	} {
		_, err := redis.ParseURL(c.url)
		if err == nil {
			t.Errorf("ParseURL(%s) accepted", c.url)
			continue
		}
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("ParseURL(%s): %v, want ErrInvalid", c.url, err)
		}
		if c.part != "cluster" && !strings.Contains(err.Error(), c.part) {
			t.Errorf("ParseURL(%s): %v, want it to name %q", c.url, err, c.part)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%s): error shows the password: %v", c.url, err)
		}
	}
}

// FuzzParseURL: no input panics the parser; every error is ErrInvalid
// and shows no userinfo password.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://u:pw@h:1/0?prefix=p:", "rediss://h:1?addr=h2:2&addr=h3:3",
		"redis://s:spw@h:1?master_name=m&addr=h2:2&password=x", "redis://h:1?cluster=true&wait_replicas=2",
		"redis://[::1]:6379", "redis://h:1?wait_replicas=1&wait_timeout=5ms", "redis://%zz", "redis://u:p@h:1#f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		d, err := redis.ParseURL(raw)
		if err == nil {
			if d.Kind != "node" && d.Kind != "cluster" && d.Kind != "sentinel" {
				t.Fatalf("kind %q", d.Kind)
			}
			return
		}
		if !errors.Is(err, backend.ErrInvalid) {
			t.Fatalf("ParseURL(%q): %v, not ErrInvalid", raw, err)
		}
		u, perr := url.Parse(raw)
		if perr != nil || u.User == nil {
			return
		}
		pw, ok := u.User.Password()
		if !ok || len(pw) < 6 {
			return
		}
		u.User = nil
		if strings.Contains(u.String(), pw) || strings.Contains(u.User.String(), pw) {
			return // the same text elsewhere in the URL
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("ParseURL(%q): error shows the password: %v", raw, err)
		}
	})
}

// TestOpenClusterAndSentinelURLs: Open connects through each form to the
// real deployment and the lease works.
func TestOpenClusterAndSentinelURLs(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	ss := testserver.StartRedisSentinel(t)
	ctx := context.Background()
	for _, c := range []struct{ url, kind string }{
		{"redis://" + rc.Nodes[0].Addr() + "?addr=" + rc.Nodes[1].Addr() + "&addr=" + rc.Nodes[2].Addr() + "&prefix=u1:", "cluster"},
		{"redis://" + rc.Nodes[3].Addr() + "?cluster=true&wait_replicas=1&wait_timeout=2s", "cluster"},
		{"redis://" + ss.Sentinels[0].Addr() + "?master_name=" + testserver.RedisSentinelMaster +
			"&addr=" + ss.Sentinels[1].Addr() + "&addr=" + ss.Sentinels[2].Addr() + "&wait_replicas=2&wait_timeout=2s", "sentinel"},
	} {
		b, err := redis.Open(ctx, c.url)
		if err != nil {
			t.Fatalf("Open(%s): %v", c.url, err)
		}
		switch b.Client().(type) {
		case *goredis.ClusterClient:
			if c.kind != "cluster" {
				t.Errorf("Open(%s): a Cluster client", c.url)
			}
		case *goredis.Client:
			if c.kind != "sentinel" {
				t.Errorf("Open(%s): a plain client", c.url)
			}
		}
		o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
		g, err := b.Acquire(ctx, "url-k", o, time.Minute)
		if err != nil {
			t.Fatalf("Open(%s): Acquire: %v", c.url, err)
		}
		if err := b.Release(ctx, "url-k", o, g.Token); err != nil {
			t.Fatalf("Open(%s): Release: %v", c.url, err)
		}
		b.Close()
	}
}
