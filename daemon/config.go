package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/schedule"
)

// Config is the daemon's configuration file (YAML).
type Config struct {
	// Backend URL; default: a SQLite file "leasehold.db" next to the
	// config. ${NAME} is replaced by the environment variable NAME (an
	// unset one is an error; $${ is a literal ${), so that a password need
	// not be in the file; logs and errors show the URL redacted (see
	// scrubber).
	Backend   string      `yaml:"backend"`
	Instance  string      `yaml:"instance"`  // default: host name
	Namespace string      `yaml:"namespace"` // default: "default"
	Grace     Duration    `yaml:"grace"`     // shutdown grace (default 30s)
	Retention Duration    `yaml:"retention"` // run history kept (default 7 days)
	Jobs      []JobConfig `yaml:"jobs"`
	HTTP      HTTPConfig  `yaml:"http"` // admin API and dashboard
	Log       LogConfig   `yaml:"log"`
	// OnFailure is every job's on_failure hook, unless the job has its own.
	OnFailure *HookConfig `yaml:"on_failure"`

	path       string
	envSecrets []string          // values of ${NAME}s in backend whose names look like credentials
	backendEnv []string          // the NAMEs of every ${NAME} in backend: jobs may not get them
	lines      map[string]int    // "jobs[2].schedule" -> line
	at         map[[2]int]string // line, column of a value -> its field path
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
	MisfireWindow Duration `yaml:"misfire_window"` // how far back catch-up looks (default 1h; shorter than retention)
	MisfireGrace  Duration `yaml:"misfire_grace"`  // how late a run may start and be on time (default 5s)
	MaxCatchUp    int      `yaml:"max_catch_up"`   // misfire run-all: at most this many (default 10)
	// Revision is part of the schedule version: set a new one to return to
	// a schedule that was replaced (see schedule.Job.Revision).
	Revision int `yaml:"revision"`
	// Paused makes the job start paused: no instance claims it until it
	// is resumed (leasehold resume, or the admin API). The state recorded
	// then rules: a job resumed once stays resumed across restarts.
	Paused bool `yaml:"paused"`
	// Retry retries failed runs after a backoff (see schedule.RetryPolicy).
	Retry RetryConfig `yaml:"retry"`
	// OnFailure is called when an occurrence fails for good (HookConfig);
	// it replaces the top-level on_failure.
	OnFailure *HookConfig `yaml:"on_failure"`

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
	// Redirects says which redirects are followed: "same_origin" (the
	// default: same scheme, host and port), "none", or "any" (another
	// origin gets none of Headers). No redirect carries a Referer.
	Redirects string `yaml:"redirects"`
}

// Duration is a time.Duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string. A bad one is a
// *yaml.TypeError, so decoding goes on and reports every bad field; its
// message carries the value's line and column, by which Parse names the
// field.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode { // reported by checkTypes, with its field
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s is not a duration such as 30s or 5m", n.Line, describeNode(n))}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: value %q is not a duration such as 30s or 5m", n.Line, n.Column, n.Value)}}
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
		return nil, fmt.Errorf("%w: %w", ErrConfigInvalid, err)
	}
	return Parse(path, data)
}

var (
	yamlColumn   = regexp.MustCompile(`^line \d+: column \d+: `)
	unmarshalMsg = regexp.MustCompile("cannot unmarshal !!(\\w+)(?: `([^`]*)`)? into \\S+")
	yamlLine     = regexp.MustCompile(`^line (\d+): (?:column (\d+): )?`)
	unknownField = regexp.MustCompile(`^field (\S+) not found in type`)
)

// Parse parses and validates config data; path names the file in errors and
// anchors relative paths (the default SQLite file is next to it). It reports
// every error it finds (errors.Join), each wrapping ErrConfigInvalid on a line of
// its own as "file:line: field: message".
func Parse(path string, data []byte) (*Config, error) {
	fail := func(line int, format string, args ...any) error {
		return &configErr{line: line, err: fmt.Errorf("%w: %s:%d: %s", ErrConfigInvalid, path, line, fmt.Sprintf(format, args...))}
	}
	if len(data) > MaxConfigSize {
		return nil, fail(0, "file is %d bytes, more than %d", len(data), MaxConfigSize)
	}
	var c Config
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil { // a syntax error: nothing more can be read
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := regexp.MustCompile(`line (\d+): `).FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.Replace(msg, m[0], "", 1)
		}
		return nil, fail(line, "%s", msg)
	}
	// The decoder's guard against excessive aliasing first: the walks
	// below follow aliases, and a small alias bomb would keep them busy
	// for minutes.
	var probe any
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return nil, fail(0, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	c.path, c.lines, c.at = path, map[string]int{}, map[[2]int]string{}
	collectLines(&root, "", c.lines, c.at)
	var errs []error
	typed := map[string]bool{} // fields whose value could not be decoded
	var kinds []typeErr
	checkTypes(&root, reflect.TypeOf(c), "", &kinds)
	for _, te := range kinds {
		typed[te.field] = true
		errs = append(errs, &configErr{line: te.line, field: te.field,
			err: fmt.Errorf("%w: %s:%d: %s: %s", ErrConfigInvalid, path, te.line, te.field, te.msg)})
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		var te *yaml.TypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, fail(0, "file is empty")
		case !errors.As(err, &te):
			return nil, fail(0, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		for _, msg := range te.Errors {
			if len(kinds) > 0 && !yamlColumn.MatchString(msg) && !unknownField.MatchString(yamlLine.ReplaceAllString(msg, "")) {
				continue // a value of the wrong kind: checkTypes said it better
			}
			msg = goTypeWords(msg)
			line, field := c.placeTypeError(&msg)
			if u := unknownField.FindStringSubmatch(msg); u != nil {
				msg = unknownFieldWords(field, u[1])
			}
			if field != "" {
				typed[field] = true
				msg = field + ": " + msg
			}
			errs = append(errs, fail(line, "%s", msg))
		}
	}
	// Validation of what decoded; an error about a field that could not
	// be decoded (or about a part of it) would only repeat it.
	for _, err := range c.validate() {
		var ce *configErr
		if errors.As(err, &ce) && overlaps(ce.field, typed) {
			continue
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return errLine(a) - errLine(b) })
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

// goTypeWords rewrites a yaml decoding message that checkTypes did not
// foresee so that it names no Go type: "cannot unmarshal !!str `x` into
// int" becomes "value "x" is not valid here".
func goTypeWords(msg string) string {
	return unmarshalMsg.ReplaceAllStringFunc(msg, func(m string) string {
		sub := unmarshalMsg.FindStringSubmatch(m)
		what := map[string]string{"seq": "a list", "map": "a mapping"}[sub[1]]
		if what == "" {
			what = fmt.Sprintf("value %q", sub[2])
		}
		return what + " is not valid here"
	})
}

// errLine returns the line an error of Parse names, for sorting.
func errLine(err error) int {
	var ce *configErr
	if errors.As(err, &ce) {
		return ce.line
	}
	return 0
}

// placeTypeError strips the "line N: [column C: ]" prefix of a decoding
// error message and returns the line and the field it concerns ("" if it
// cannot be told).
func (c *Config) placeTypeError(msg *string) (int, string) {
	m := yamlLine.FindStringSubmatch(*msg)
	if m == nil {
		return 0, ""
	}
	*msg = strings.TrimPrefix(*msg, m[0])
	line, _ := strconv.Atoi(m[1])
	if m[2] != "" { // our Duration: the value's exact position
		col, _ := strconv.Atoi(m[2])
		return line, c.at[[2]int{line, col}]
	}
	var found []string
	suffix := ""
	if u := unknownField.FindStringSubmatch(*msg); u != nil {
		suffix = u[1]
	}
	for pos, f := range c.at {
		if pos[0] == line && (suffix == "" || f == suffix || strings.HasSuffix(f, "."+suffix)) {
			found = append(found, f)
		}
	}
	if len(found) == 1 {
		return line, found[0]
	}
	return line, ""
}

// overlaps reports whether field is one of set, inside one, or holds one.
func overlaps(field string, set map[string]bool) bool {
	for f := range set {
		if f == field || strings.HasPrefix(f, field+".") || strings.HasPrefix(f, field+"[") ||
			strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// collectLines records the line of every value by its field path, and the
// field path of every value by its line and column.
func collectLines(n *yaml.Node, prefix string, out map[string]int, at map[[2]int]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectLines(c, prefix, out, at)
		}
	case yaml.MappingNode:
		out[prefix] = n.Line
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			v := n.Content[i+1]
			out[k] = v.Line
			at[[2]int{v.Line, v.Column}] = k
			collectLines(v, k, out, at)
		}
	case yaml.SequenceNode:
		out[prefix] = n.Line
		for i, c := range n.Content {
			collectLines(c, fmt.Sprintf("%s[%d]", prefix, i), out, at)
		}
	}
}

// Path returns the config file's path.
func (c *Config) Path() string { return c.path }

// configErr is one error of a config file: its line, the field path it
// concerns ("" if none) and the message, which wraps ErrConfigInvalid.
type configErr struct {
	line  int
	field string
	err   error
}

func (e *configErr) Error() string { return e.err.Error() }
func (e *configErr) Unwrap() error { return e.err }

// errf returns an error naming the file, the line of field (or of the
// nearest enclosing field that is in the file), field and the message.
func (c *Config) errf(field string, format string, args ...any) error {
	line := c.lineOf(field)
	return &configErr{line, field, fmt.Errorf("%w: %s:%d: %s: %s", ErrConfigInvalid, c.path, line, field, fmt.Sprintf(format, args...))}
}

// lineOf returns the line of field, or of its nearest enclosing field
// that the file has (a default that is invalid: its job's line).
func (c *Config) lineOf(field string) int {
	for f := field; f != ""; {
		if l, ok := c.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// jobKey maps a schedule.Job field to its config key ("" if it has none).
func jobKey(field string) string {
	return map[string]string{
		"Name": "name", "Schedule": "schedule", "Zone": "zone", "Mode": "mode", "Misfire": "misfire", "Crash": "crash",
		"Timeout": "timeout", "Jitter": "jitter", "MaxConcurrent": "max_concurrent", "MisfireWindow": "misfire_window", "MisfireGrace": "misfire_grace",
		"MaxCatchUp": "max_catch_up", "MaxAttempts": "max_attempts", "LeaseTTL": "lease_ttl", "Revision": "revision",
		"Retry.Max": "retry.max", "Retry.Backoff": "retry.backoff", "Retry.MaxBackoff": "retry.max_backoff",
	}[field]
}

// validate fills defaults and returns every error it finds.
func (c *Config) validate() []error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	c.backendEnv = envNames(c.Backend)
	if expanded, secrets, err := expandEnv(c.Backend); err != nil {
		add(c.errf("backend", "%v", err))
	} else {
		c.Backend, c.envSecrets = expanded, secrets
	}
	if c.Backend == "" {
		c.Backend = "sqlite://" + filepath.Join(filepath.Dir(absPath(c.path)), "leasehold.db")
	}
	if c.Namespace == "" {
		c.Namespace = leasehold.DefaultNamespace
	}
	if err := leasehold.ValidatePath("namespace", c.Namespace); err != nil {
		add(c.errf("namespace", "%q: %v", c.Namespace, err))
	}
	if c.Instance == "" {
		h, _ := os.Hostname()
		c.Instance = h
	}
	if err := leasehold.ValidatePath("instance", c.Instance); err != nil {
		add(c.errf("instance", "%q: %v", c.Instance, err))
	}
	// The daemon holds the lock "instances/<instance>" of its namespace.
	if err := leasehold.ValidatePath("instance lock key", instanceKey(c.Instance)); err != nil {
		add(c.errf("instance", "%.40q… (%d bytes): %v", c.Instance, len(c.Instance), err))
	}
	if k := leasehold.LockKey(c.Namespace, instanceKey(c.Instance)); len(k) > backend.MaxKeyLen {
		add(c.errf("instance", "%.40q… in namespace %.40q… makes the instance lock key %d bytes, more than the limit of %d", c.Instance, c.Namespace, len(k), backend.MaxKeyLen))
	}
	if c.Grace < 0 {
		add(c.errf("grace", "%v is negative", time.Duration(c.Grace)))
	}
	if c.Grace == 0 {
		c.Grace = Duration(30 * time.Second)
	}
	if c.Retention == 0 {
		c.Retention = Duration(7 * 24 * time.Hour)
	}
	if c.Retention < 0 {
		add(c.errf("retention", "%v is negative", time.Duration(c.Retention)))
	}
	errs = append(errs, c.validateHTTP()...)
	seen := map[string]int{}
	for i := range c.Jobs {
		j := &c.Jobs[i]
		f := func(name string) string { return fmt.Sprintf("jobs[%d].%s", i, name) }
		if prev, dup := seen[j.Name]; dup {
			add(c.errf(f("name"), "%q is also the name of jobs[%d]", j.Name, prev))
		} else {
			seen[j.Name] = i
		}
		if _, err := j.job(nil, time.Duration(c.Retention)); err != nil {
			for _, e := range flatten(err) {
				var fe *schedule.FieldError
				switch {
				case errors.As(e, &fe) && jobKey(fe.Field) != "":
					add(c.errf(f(jobKey(fe.Field)), "%v%s", e, enumHint(jobKey(fe.Field), j)))
				default:
					add(c.errf(fmt.Sprintf("jobs[%d]", i), "%v", e))
				}
			}
		}
		if err := schedule.CheckKeyLengths(c.Namespace, j.Name); err != nil {
			add(c.errf(f("name"), "%v", err))
		}
		if (j.Command == nil) == (j.HTTP == nil) {
			add(c.errf(fmt.Sprintf("jobs[%d]", i), "job %q needs exactly one of command or http", j.Name))
		}
		if j.Command != nil {
			if len(j.Command.Argv) == 0 || j.Command.Argv[0] == "" {
				add(c.errf(f("command.argv"), "job %q: argv %q needs a program as its first element", j.Name, j.Command.Argv))
			}
			if j.Command.MaxOutput < 0 || j.Command.MaxOutput > 1<<20 {
				add(c.errf(f("command.max_output"), "%d is not in 0..1048576", j.Command.MaxOutput))
			}
			for _, k := range slices.Sorted(maps.Keys(j.Command.Env)) {
				if !validEnvName(k) {
					add(c.errf(f("command.env"), "variable name %q is not valid", k))
				}
			}
			for _, k := range j.Command.EnvPassthrough {
				switch {
				case !validEnvName(k):
					add(c.errf(f("command.env_passthrough"), "variable name %q is not valid", k))
				case c.secretEnv(k):
					add(c.errf(f("command.env_passthrough"), "%q holds a secret of the daemon (a token, the backend URL or a part of it); jobs never get it", k))
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
				add(c.errf(f("http.url"), "%q is not an http(s) URL", shown))
			}
			if h.Method == "" {
				h.Method = "GET"
			}
			if !regexp.MustCompile(`^[A-Z]+$`).MatchString(h.Method) {
				add(c.errf(f("http.method"), "%q is not an HTTP method", h.Method))
			}
			switch h.Redirects {
			case "":
				h.Redirects = RedirectsSameOrigin
			case RedirectsSameOrigin, RedirectsNone, RedirectsAny:
			default:
				add(c.errf(f("http.redirects"), "%q is not %s, %s or %s%s", h.Redirects, RedirectsSameOrigin, RedirectsNone, RedirectsAny,
					didYouMean(h.Redirects, RedirectsSameOrigin, RedirectsNone, RedirectsAny)))
			}
			if h.Expect != 0 && (h.Expect < 100 || h.Expect > 599) {
				add(c.errf(f("http.expect"), "%d is not an HTTP status", h.Expect))
			}
		}
	}
	return append(errs, c.validateHooks()...)
}

// enumHint is " (did you mean ...?)" for a job's mode, misfire or crash
// (key) whose value is a near miss of one of the values it takes.
func enumHint(key string, j *JobConfig) string {
	switch key {
	case "mode":
		return didYouMean(j.Mode, string(schedule.Once), string(schedule.Leader), string(schedule.EveryInstance))
	case "misfire":
		return didYouMean(j.Misfire, string(schedule.MisfireSkip), string(schedule.MisfireRunOnce), string(schedule.MisfireRunAll))
	case "crash":
		return didYouMean(j.Crash, string(schedule.CrashRetry), string(schedule.CrashSkip))
	}
	return ""
}

// didYouMean is " (did you mean %q?)" naming the one of options within
// two edits of got (case aside), or "".
func didYouMean(got string, options ...string) string {
	best, bestD := "", 3
	for _, o := range options {
		if d := editDistance(strings.ToLower(got), o); d < bestD {
			best, bestD = o, d
		}
	}
	if best == "" || got == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// flatten returns the errors joined in err (err itself if it joins none).
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// job turns the config into a schedule.Job (fn may be nil for validation).
func (j *JobConfig) job(fn schedule.Func, retention time.Duration) (schedule.Job, error) {
	sj := schedule.Job{
		Name: j.Name, Schedule: j.Schedule, Zone: j.Zone, Func: fn,
		Mode: schedule.Mode(j.Mode), Misfire: schedule.Misfire(j.Misfire), Crash: schedule.Crash(j.Crash),
		Timeout: time.Duration(j.Timeout), Jitter: time.Duration(j.Jitter), LeaseTTL: time.Duration(j.LeaseTTL),
		MaxConcurrent: j.MaxConcurrent, MaxAttempts: j.MaxAttempts, Revision: j.Revision, StartPaused: j.Paused,
		MisfireWindow: time.Duration(j.MisfireWindow), MisfireGrace: time.Duration(j.MisfireGrace), MaxCatchUp: j.MaxCatchUp,
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
// the backend URL's password and credential-like parameters, the values of
// its ${NAME}s whose names look like credentials, the same in
// HTTP jobs' URLs, HTTP jobs' credential-like header values, and the admin
// API's tokens (from the config and the environment).
func (c *Config) scrubber() *redact.Scrubber {
	secrets := append(redact.Secrets(c.Backend), c.envSecrets...)
	for _, j := range c.Jobs {
		if h := j.HTTP; h != nil {
			secrets = append(secrets, redact.Secrets(h.URL)...)
			// net/http sends a URL's userinfo as "Authorization: Basic
			// base64(user:password)", which an endpoint may echo.
			if u, err := url.Parse(h.URL); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok {
					secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
				}
			}
			for k, v := range h.Headers {
				if redact.SensitiveName(k) {
					secrets = append(secrets, v, strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")), strings.TrimSpace(strings.TrimPrefix(v, "Basic ")))
				}
			}
		}
	}
	secrets = append(secrets, c.hookSecrets()...)
	if ts, err := c.adminTokens(); err == nil {
		for _, t := range ts {
			secrets = append(secrets, t.Secret)
		}
	}
	return redact.NewScrubber(secrets...)
}
