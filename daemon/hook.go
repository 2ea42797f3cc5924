package daemon

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
)

// HookConfig is an `on_failure` hook: what the daemon does when an
// occurrence of a job fails for good (its failure recorded in the run
// ledger, no retry left). Exactly one of Command and HTTP is set. The
// top-level `on_failure` is every job's default; a job's own replaces it.
type HookConfig struct {
	Command *HookCommand `yaml:"command"`
	HTTP    *HookHTTP    `yaml:"http"`
	// Timeout bounds one call of the hook (default 30s, at most 10m).
	Timeout Duration `yaml:"timeout"`
}

// HookCommand runs a program directly (argv, no shell) under a
// supervisor, in the clean environment of a command job, with the failed
// occurrence in LEASEHOLD_* variables and its error in LEASEHOLD_ERROR.
type HookCommand struct {
	Argv           []string          `yaml:"argv"`
	Env            map[string]string `yaml:"env"`
	EnvPassthrough []string          `yaml:"env_passthrough"`
	Dir            string            `yaml:"dir"`
}

// HookHTTP POSTs the failed occurrence as JSON (HookBody) to URL. No
// redirect is followed.
type HookHTTP struct {
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
}

// HookBody is the JSON an HTTP `on_failure` hook POSTs, and what a command
// hook gets in its LEASEHOLD_* variables.
type HookBody struct {
	Namespace   string `json:"namespace"`
	Job         string `json:"job"`
	ScheduledAt string `json:"scheduled_at"` // InstantFormat
	Attempt     int    `json:"attempt"`
	Token       string `json:"token"` // the failed attempt's fencing token; "0" for every-instance jobs
	Instance    string `json:"instance"`
	Error       string `json:"error"` // as recorded in the run history (secrets masked)
}

// Hook timeouts.
const (
	DefaultHookTimeout = 30 * time.Second
	maxHookTimeout     = 10 * time.Minute
)

// hookFor returns job j's effective on_failure hook (nil: none).
func (c *Config) hookFor(j *JobConfig) *HookConfig {
	if j.OnFailure != nil {
		return j.OnFailure
	}
	return c.OnFailure
}

// validateHooks checks the top-level and the jobs' on_failure hooks and
// fills their defaults.
func (c *Config) validateHooks() []error {
	var errs []error
	if c.OnFailure != nil {
		errs = append(errs, c.validateHook("on_failure", c.OnFailure)...)
	}
	for i := range c.Jobs {
		if h := c.Jobs[i].OnFailure; h != nil {
			errs = append(errs, c.validateHook(fmt.Sprintf("jobs[%d].on_failure", i), h)...)
		}
	}
	return errs
}

func (c *Config) validateHook(field string, h *HookConfig) []error {
	var errs []error
	add := func(sub, format string, args ...any) { errs = append(errs, c.errf(field+sub, format, args...)) }
	if (h.Command == nil) == (h.HTTP == nil) {
		add("", "needs exactly one of command or http")
	}
	switch {
	case h.Timeout < 0:
		add(".timeout", "%v is negative", time.Duration(h.Timeout))
	case time.Duration(h.Timeout) > maxHookTimeout:
		add(".timeout", "%v is more than %v", time.Duration(h.Timeout), maxHookTimeout)
	case h.Timeout == 0:
		h.Timeout = Duration(DefaultHookTimeout)
	}
	if cmd := h.Command; cmd != nil {
		if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
			add(".command.argv", "%q needs a program as its first element", cmd.Argv)
		}
		for _, k := range slices.Sorted(maps.Keys(cmd.Env)) {
			if !validEnvName(k) {
				add(".command.env", "variable name %q is not valid", k)
			}
		}
		for _, k := range cmd.EnvPassthrough {
			switch {
			case !validEnvName(k):
				add(".command.env_passthrough", "variable name %q is not valid", k)
			case c.secretEnv(k):
				add(".command.env_passthrough", "%q holds a secret of the daemon (a token, the backend URL or a part of it); hooks never get it", k)
			}
		}
	}
	if hh := h.HTTP; hh != nil {
		u, err := url.Parse(hh.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			shown := redactURL(hh.URL)
			if err != nil { // unparsed: mask as free text (a password may hold a '/')
				shown = redact.Text(hh.URL)
			}
			add(".http.url", "%q is not an http(s) URL", shown)
		}
		for _, k := range slices.Sorted(maps.Keys(hh.Headers)) {
			if !validHeaderName(k) {
				add(".http.headers", "header name %q is not valid", k)
			}
		}
	}
	return errs
}

// validHeaderName: an HTTP token (RFC 9110), and not one the hook sets.
func validHeaderName(k string) bool {
	if k == "" || strings.EqualFold(k, "Content-Type") || strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Host") {
		return false
	}
	for _, r := range k {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return http.CanonicalHeaderKey(k) != ""
}

// hookSecrets are the secrets of the config's HTTP hooks, masked like an
// HTTP job's: the URL's credentials (and the Basic header net/http makes
// of them) and credential-like header values.
func (c *Config) hookSecrets() []string {
	var secrets []string
	hooks := []*HookConfig{c.OnFailure}
	for i := range c.Jobs {
		hooks = append(hooks, c.Jobs[i].OnFailure)
	}
	for _, h := range hooks {
		if h == nil || h.HTTP == nil {
			continue
		}
		secrets = append(secrets, redact.Secrets(h.HTTP.URL)...)
		if u, err := url.Parse(h.HTTP.URL); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				secrets = append(secrets, pw, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
			}
		}
		for k, v := range h.HTTP.Headers {
			if redact.SensitiveName(k) {
				secrets = append(secrets, v, strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")), strings.TrimSpace(strings.TrimPrefix(v, "Basic ")))
			}
		}
	}
	return secrets
}
