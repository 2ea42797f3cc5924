package redis

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redact"
)

// Deployment is what a backend URL names: which kind of deployment, its
// go-redis options, and the backend options its leasehold parameters
// set. ParseURL returns it; Open connects with it.
type Deployment struct {
	// Kind is "node", "cluster" or "sentinel".
	Kind string
	// Exactly one of Node, Cluster and Sentinel is set, by Kind.
	Node     *goredis.Options
	Cluster  *goredis.ClusterOptions
	Sentinel *goredis.FailoverOptions
	// Options are set by the leasehold parameters (prefix, wait_replicas,
	// wait_timeout).
	Options []Option
	// Redacted is the URL with its passwords masked, for messages.
	Redacted string
}

// ParseURL reads a backend URL without connecting. The form is chosen by
// its parameters, in go-redis's own URL syntax:
//
//   - master_name=M: Sentinel (go-redis ParseFailoverURL). The host and
//     every addr=host:port are Sentinels; the userinfo is the Sentinels'
//     user and password; username= and password= are the primary's and
//     replicas'. A path /db selects the database.
//   - else addr=host:port (repeatable), or cluster=true with one seed: a
//     Cluster (go-redis ParseClusterURL). The host and every addr are
//     seeds; the userinfo is the nodes' user and password. A Cluster has
//     database 0 only, so a path other than /0 is an error.
//   - else one node (go-redis ParseURL): redis://[user:pw@]host:port[/db].
//
// rediss:// is TLS (at least TLS 1.2) in every form. The leasehold
// parameters prefix, wait_replicas (an integer ≥ 0) and wait_timeout (a
// duration, default DefaultWaitTimeout) are removed before go-redis reads
// the rest; a parameter go-redis does not know for the form is an error.
// Every error wraps backend.ErrInvalid, names the part at fault and never
// shows a password.
func ParseURL(rawURL string) (*Deployment, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: backend url: %s", backend.ErrInvalid, redact.ParseReason(err))
	}
	red := redact.URL(rawURL)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: backend url %q: %s", backend.ErrInvalid, red, fmt.Sprintf(format, a...))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, bad("scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Host == "" {
		return nil, bad("no host: name host:port after %s://", u.Scheme)
	}
	if u.Fragment != "" {
		return nil, bad("a fragment (#…) means nothing here")
	}
	q := u.Query()
	d := &Deployment{Redacted: red}
	if q.Has("prefix") {
		d.Options = append(d.Options, WithPrefix(q.Get("prefix")))
		q.Del("prefix")
	}
	if q.Has("wait_timeout") && !q.Has("wait_replicas") {
		return nil, bad("wait_timeout without wait_replicas ≥ 1")
	}
	if q.Has("wait_replicas") {
		n, err := strconv.Atoi(q.Get("wait_replicas"))
		if err != nil || n < 0 {
			return nil, bad("wait_replicas %q: want a whole number of replicas ≥ 0", q.Get("wait_replicas"))
		}
		timeout := DefaultWaitTimeout
		if v := q.Get("wait_timeout"); v != "" {
			if timeout, err = time.ParseDuration(v); err != nil || timeout < time.Millisecond {
				return nil, bad("wait_timeout %q: want a duration of at least 1ms (e.g. 200ms)", v)
			}
		}
		if n == 0 && q.Has("wait_timeout") {
			return nil, bad("wait_timeout without wait_replicas ≥ 1")
		}
		d.Options = append(d.Options, WithWaitReplicas(n, timeout))
		q.Del("wait_replicas")
		q.Del("wait_timeout")
	}
	cluster := false
	if q.Has("cluster") {
		v, err := strconv.ParseBool(q.Get("cluster"))
		if err != nil {
			return nil, bad("cluster %q: want true or false", q.Get("cluster"))
		}
		cluster = v
		q.Del("cluster")
	}
	for _, a := range q["addr"] {
		if err := checkAddr(a); err != nil {
			return nil, bad("addr %q: %v", redact.Text(a), err)
		}
	}
	if err := checkAddr(u.Host); err != nil {
		return nil, bad("host %q: %v", u.Host, err)
	}
	u.RawQuery = q.Encode()
	// goredis's messages may repeat the URL it was given: show it redacted.
	goErr := func(form string, err error) error {
		msg := strings.ReplaceAll(err.Error(), u.String(), red)
		msg = strings.ReplaceAll(msg, rawURL, red)
		return bad("%s form: %s", form, redact.Text(msg))
	}
	tls12 := func(c *tls.Config) {
		if c != nil && c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
	}
	switch {
	case q.Has("master_name"):
		if cluster {
			return nil, bad("cluster=true and master_name: a URL names a Cluster or a Sentinel-managed primary, not both")
		}
		if strings.TrimSpace(q.Get("master_name")) == "" {
			return nil, bad("master_name is empty: name the primary the Sentinels monitor")
		}
		o, err := goredis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, goErr("sentinel", err)
		}
		tls12(o.TLSConfig)
		o.ContextTimeoutEnabled = true
		d.Kind, d.Sentinel = "sentinel", o
	case cluster || q.Has("addr"):
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return nil, bad("path %q: a Cluster has database 0 only", u.Path)
		}
		u.Path = ""
		o, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return nil, goErr("cluster", err)
		}
		tls12(o.TLSConfig)
		o.ContextTimeoutEnabled = true
		d.Kind, d.Cluster = "cluster", o
	default:
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return nil, goErr("node", err)
		}
		tls12(o.TLSConfig)
		o.ContextTimeoutEnabled = true
		d.Kind, d.Node = "node", o
	}
	return d, nil
}

// checkAddr checks a host:port.
func checkAddr(a string) error {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return nil // go-redis adds the default port 6379
	}
	host, port := a[:i], a[i+1:]
	if host == "" {
		return fmt.Errorf("no host before the port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// NewClient returns a go-redis client for the deployment: a Client for
// one node, a ClusterClient, or a failover Client (Sentinel).
func (d *Deployment) NewClient() goredis.UniversalClient {
	switch d.Kind {
	case "cluster":
		return goredis.NewClusterClient(d.Cluster)
	case "sentinel":
		return goredis.NewFailoverClient(d.Sentinel)
	}
	return goredis.NewClient(d.Node)
}
