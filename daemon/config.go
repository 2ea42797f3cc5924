package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/schedule"
)

// ErrConfig: the configuration file is invalid. The message names the file,
// the line, the field and the value.
var ErrConfig = errors.New("leasehold/daemon: invalid config")

// Config is the daemon's configuration file (YAML).
type Config struct {
	// Backend URL; default: a SQLite file "leasehold.db" next to the config.
	Backend   string      `yaml:"backend"`
	Instance  string      `yaml:"instance"`  // default: host name
	Namespace string      `yaml:"namespace"` // default: "default"
	Grace     Duration    `yaml:"grace"`     // shutdown grace (default 30s)
	Retention Duration    `yaml:"retention"` // run history kept (default 7 days)
	Jobs      []JobConfig `yaml:"jobs"`
	HTTP      HTTPConfig  `yaml:"http"` // admin API and dashboard
	Log       LogConfig   `yaml:"log"`

	path  string
	lines map[string]int // "jobs[2].schedule" -> line
}

// JobConfig is one job. Exactly one of Command and HTTP is set.
type JobConfig struct {
	Name          string   `yaml:"name"`
	Schedule      string   `yaml:"schedule"`
	Zone          string   `yaml:"zone"`
	Mode          string   `yaml:"mode"`
	Misfire       string   `yaml:"misfire"`
	Crash         string   `yaml:"crash"`
	Timeout       Duration `yaml:"timeout"`
	Jitter        Duration `yaml:"jitter"`
	LeaseTTL      Duration `yaml:"lease_ttl"`
	MaxConcurrent int      `yaml:"max_concurrent"`
	MaxAttempts   int      `yaml:"max_attempts"`
	// Retry retries failed runs after a backoff (see schedule.RetryPolicy).
	Retry RetryConfig `yaml:"retry"`

	Command *CommandJob `yaml:"command"`
	HTTP    *HTTPJob    `yaml:"http"`
}

// RetryConfig is a job's `retry: {max: 3, backoff: 10s, max_backoff: 10m}`:
// a failed run is retried up to max times, the first after backoff
// (default 10s), each later one after twice the wait before, up to
// max_backoff (default 10m). Each retry is a new attempt with a greater
// fencing token, run by whichever instance reclaims it first.
type RetryConfig struct {
	Max        int      `yaml:"max"`
	Backoff    Duration `yaml:"backoff"`
	MaxBackoff Duration `yaml:"max_backoff"`
}

// CommandJob runs a program directly (argv, no shell).
type CommandJob struct {
	Argv []string          `yaml:"argv"`
	Env  map[string]string `yaml:"env"`
	// EnvPassthrough names variables of the daemon's environment the job
	// also gets; the daemon's tokens and backend URL cannot be named.
	EnvPassthrough []string `yaml:"env_passthrough"`
	Dir            string   `yaml:"dir"`
	MaxOutput      int      `yaml:"max_output"` // bytes of output kept in history (default 4096)
}

// HTTPJob calls an HTTP endpoint.
type HTTPJob struct {
	Method  string            `yaml:"method"` // default GET
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	Body    string            `yaml:"body"`
	Expect  int               `yaml:"expect"` // expected status (default: any 2xx)
}

// Duration is a time.Duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 30s or 5m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MaxConfigSize bounds the config file.
const MaxConfigSize = 1 << 20

// Load reads and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return Parse(path, data)
}

var yamlLine = regexp.MustCompile(`line (\d+): `)

// Parse parses and validates config data; path names the file in errors and
// anchors relative paths (the default SQLite file is next to it).
func Parse(path string, data []byte) (*Config, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrConfig, path, line, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxConfigSize {
		return nil, fail(0, "file is %d bytes, more than %d", len(data), MaxConfigSize)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.Replace(msg, m[0], "", 1)
		}
		if errors.Is(err, io.EOF) {
			return nil, fail(0, "file is empty")
		}
		return nil, fail(line, "%s", msg)
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	c.path, c.lines = path, map[string]int{}
	collectLines(&root, "", c.lines)
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// collectLines records the line of every scalar value by its field path.
func collectLines(n *yaml.Node, prefix string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectLines(c, prefix, out)
		}
	case yaml.MappingNode:
		out[prefix] = n.Line
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			out[k] = n.Content[i+1].Line
			collectLines(n.Content[i+1], k, out)
		}
	case yaml.SequenceNode:
		out[prefix] = n.Line
		for i, c := range n.Content {
			collectLines(c, fmt.Sprintf("%s[%d]", prefix, i), out)
		}
	}
}

// Path returns the config file's path.
func (c *Config) Path() string { return c.path }

func (c *Config) errf(field string, format string, args ...any) error {
	return fmt.Errorf("%w: %s:%d: %s: %s", ErrConfig, c.path, c.lines[field], field, fmt.Sprintf(format, args...))
}

func (c *Config) validate() error {
	if c.Backend == "" {
		c.Backend = "sqlite://" + filepath.Join(filepath.Dir(absPath(c.path)), "leasehold.db")
	}
	if c.Namespace == "" {
		c.Namespace = leasehold.DefaultNamespace
	}
	if err := leasehold.ValidatePath("namespace", c.Namespace); err != nil {
		return c.errf("namespace", "%q: %v", c.Namespace, err)
	}
	if c.Instance == "" {
		h, _ := os.Hostname()
		c.Instance = h
	}
	if err := leasehold.ValidatePath("instance", c.Instance); err != nil {
		return c.errf("instance", "%q: %v", c.Instance, err)
	}
	// The daemon holds the lock "instances/<instance>" of its namespace.
	if err := leasehold.ValidatePath("instance lock key", instanceKey(c.Instance)); err != nil {
		return c.errf("instance", "%.40q… (%d bytes): %v", c.Instance, len(c.Instance), err)
	}
	if k := leasehold.LockKey(c.Namespace, instanceKey(c.Instance)); len(k) > backend.MaxKeyLen {
		return c.errf("instance", "%.40q… in namespace %.40q… makes the instance lock key %d bytes, more than the limit of %d", c.Instance, c.Namespace, len(k), backend.MaxKeyLen)
	}
	if c.Grace < 0 {
		return c.errf("grace", "%v is negative", time.Duration(c.Grace))
	}
	if c.Grace == 0 {
		c.Grace = Duration(30 * time.Second)
	}
	if c.Retention == 0 {
		c.Retention = Duration(7 * 24 * time.Hour)
	}
	if c.Retention < 0 {
		return c.errf("retention", "%v is negative", time.Duration(c.Retention))
	}
	if err := c.validateHTTP(); err != nil {
		return err
	}
	seen := map[string]int{}
	for i := range c.Jobs {
		j := &c.Jobs[i]
		f := func(name string) string { return fmt.Sprintf("jobs[%d].%s", i, name) }
		if prev, dup := seen[j.Name]; dup {
			return c.errf(f("name"), "%q is also the name of jobs[%d]", j.Name, prev)
		}
		seen[j.Name] = i
		if _, err := j.job(nil, time.Duration(c.Retention)); err != nil {
			return c.errf(f(fieldOf(err)), "%v", err)
		}
		if err := schedule.CheckKeyLengths(c.Namespace, j.Name); err != nil {
			return c.errf(f("name"), "%v", err)
		}
		if (j.Command == nil) == (j.HTTP == nil) {
			return c.errf(fmt.Sprintf("jobs[%d]", i), "job %q needs exactly one of command or http", j.Name)
		}
		if j.Command != nil {
			if len(j.Command.Argv) == 0 || j.Command.Argv[0] == "" {
				return c.errf(f("command.argv"), "job %q: argv %q needs a program as its first element", j.Name, j.Command.Argv)
			}
			if j.Command.MaxOutput < 0 || j.Command.MaxOutput > 1<<20 {
				return c.errf(f("command.max_output"), "%d is not in 0..1048576", j.Command.MaxOutput)
			}
			for k := range j.Command.Env {
				if !validEnvName(k) {
					return c.errf(f("command.env"), "variable name %q is not valid", k)
				}
			}
			for _, k := range j.Command.EnvPassthrough {
				switch {
				case !validEnvName(k):
					return c.errf(f("command.env_passthrough"), "variable name %q is not valid", k)
				case c.secretEnv(k):
					return c.errf(f("command.env_passthrough"), "%q holds a secret of the daemon (a token or the backend URL); jobs never get it", k)
				}
			}
		}
		if h := j.HTTP; h != nil {
			u, err := url.Parse(h.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				shown := redactURL(h.URL)
				if err != nil { // unparsed: mask as free text (a password may hold a '/')
					shown = redact.Text(h.URL)
				}
				return c.errf(f("http.url"), "%q is not an http(s) URL", shown)
			}
			if h.Method == "" {
				h.Method = "GET"
			}
			if !regexp.MustCompile(`^[A-Z]+$`).MatchString(h.Method) {
				return c.errf(f("http.method"), "%q is not an HTTP method", h.Method)
			}
			if h.Expect != 0 && (h.Expect < 100 || h.Expect > 599) {
				return c.errf(f("http.expect"), "%d is not an HTTP status", h.Expect)
			}
		}
	}
	return nil
}

// fieldOf maps a job validation error to the config field it concerns.
func fieldOf(err error) string {
	msg := err.Error()
	for _, p := range []struct{ needle, field string }{
		{"max attempts", "max_attempts"}, // before "retry max": its message may name both
		{"retry max backoff", "retry.max_backoff"}, {"retry backoff", "retry.backoff"}, {"retry max", "retry.max"},
		{"time zone", "zone"}, {"job name", "name"}, {"invalid schedule", "schedule"}, {"mode", "mode"},
		{"misfire", "misfire"}, {"crash", "crash"}, {"timeout", "timeout"}, {"jitter", "jitter"},
		{"lease ttl", "lease_ttl"}, {"max concurrent", "max_concurrent"},
	} {
		if strings.Contains(msg, p.needle) {
			return p.field
		}
	}
	return "name"
}

// job turns the config into a schedule.Job (fn may be nil for validation).
func (j *JobConfig) job(fn schedule.Func, retention time.Duration) (schedule.Job, error) {
	sj := schedule.Job{
		Name: j.Name, Schedule: j.Schedule, Zone: j.Zone, Func: fn,
		Mode: schedule.Mode(j.Mode), Misfire: schedule.Misfire(j.Misfire), Crash: schedule.Crash(j.Crash),
		Timeout: time.Duration(j.Timeout), Jitter: time.Duration(j.Jitter), LeaseTTL: time.Duration(j.LeaseTTL),
		MaxConcurrent: j.MaxConcurrent, MaxAttempts: j.MaxAttempts,
		Retry: schedule.RetryPolicy{Max: j.Retry.Max, Backoff: time.Duration(j.Retry.Backoff), MaxBackoff: time.Duration(j.Retry.MaxBackoff)},
	}
	if fn == nil {
		sj.Func = func(context.Context, schedule.Run) error { return nil }
	}
	return sj, schedule.Validate(sj, retention)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// redactURL hides a URL's password and credential-like query parameters
// for messages, logs and history.
func redactURL(s string) string { return redact.URL(s) }

// scrubber masks the config's secrets wherever they could be repeated:
// the backend URL's password and credential-like parameters, the same in
// HTTP jobs' URLs, HTTP jobs' credential-like header values, and the admin
// API's tokens (from the config and the environment).
func (c *Config) scrubber() *redact.Scrubber {
	secrets := redact.Secrets(c.Backend)
	for _, j := range c.Jobs {
		if h := j.HTTP; h != nil {
			secrets = append(secrets, redact.Secrets(h.URL)...)
			for k, v := range h.Headers {
				if redact.SensitiveName(k) {
					secrets = append(secrets, v, strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")))
				}
			}
		}
	}
	if ts, err := c.adminTokens(); err == nil {
		for _, t := range ts {
			secrets = append(secrets, t.Secret)
		}
	}
	return redact.NewScrubber(secrets...)
}
