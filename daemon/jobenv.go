package daemon

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/schedule"
)

// baseEnv names the variables of the daemon's environment every command job
// gets. Nothing else is inherited: the daemon's environment holds its admin
// and read tokens and may hold backend passwords.
var baseEnv = []string{"PATH", "HOME", "LANG", "TZ"}

// defaultPath is a job's PATH when the daemon has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// secretEnv reports whether name is a variable of the daemon's environment
// that holds one of its secrets, which env_passthrough may not name:
// the token variables, the backend URL, the variables a backend client
// reads a password from, the config's token_env names, and every variable
// the backend URL references (${NAME}: a password is often taken so).
func (c *Config) secretEnv(name string) bool {
	if fixedSecretEnv(name) || slices.Contains(c.backendEnv, name) {
		return true
	}
	for _, t := range c.HTTP.Tokens {
		if t.TokenEnv == name {
			return true
		}
	}
	return false
}

// fixedSecretEnv reports the variables that hold a secret whatever the
// config: the token variables, the backend URL, and where the backends'
// clients read a password from (pgx: PGPASSWORD, PGPASSFILE; the MySQL
// backend: MYSQL_PWD).
func fixedSecretEnv(name string) bool {
	switch name {
	case EnvAdminToken, EnvReadToken, "LEASEHOLD_API_TOKEN", "LEASEHOLD_BACKEND", "PGPASSWORD", "PGPASSFILE", "MYSQL_PWD":
		return true
	}
	return false
}

// validEnvName: a non-empty name without '=' or NUL.
func validEnvName(k string) bool { return k != "" && !strings.ContainsAny(k, "=\x00") }

// jobEnv is the environment of one run of a command job: PATH, HOME, LANG
// and TZ from the daemon, the variables env_passthrough names (when set),
// the job's env, then the run's LEASEHOLD_* variables, which nothing
// overrides.
func jobEnv(c *CommandJob, r schedule.Run, instance string) []string {
	var env []string
	for _, k := range append(append([]string(nil), baseEnv...), c.EnvPassthrough...) {
		if fixedSecretEnv(k) {
			continue // refused at config load; never passed, however the job was built
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		} else if k == "PATH" {
			env = append(env, "PATH="+defaultPath)
		}
	}
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	return append(env,
		"LEASEHOLD_JOB="+r.Job,
		"LEASEHOLD_SCHEDULED_AT="+r.ScheduledAt.UTC().Format(InstantFormat),
		"LEASEHOLD_TOKEN="+r.Token.String(),
		"LEASEHOLD_ATTEMPT="+strconv.Itoa(r.Attempt),
		"LEASEHOLD_INSTANCE="+instance,
	)
}
