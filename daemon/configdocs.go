package daemon

// The documentation of every config field, by its path ("jobs[].retry.max"):
// the source of docs/config.md and docs/config.schema.json (configref.go
// renders them; go run ./internal/configdoc writes them). A test fails if a
// field of Config has no entry here, or an entry no field.

// The documentation of on_failure, at the top level and in each job.
const (
	docHook        = "Called once for each occurrence of the job that fails for good (its failure recorded in the run ledger, no retry left), by the daemon that ran that last attempt: not for an attempt that is retried. An occurrence whose runner died and that is abandoned (crash: skip, or attempts ran out) calls it too, by the daemon that abandons it; one that is reclaimed does not. Every-instance jobs: by each daemon whose run failed. A hook that fails or times out is logged, not retried. Exactly one of command and http."
	docHookCommand = "Run a program directly (argv, no shell) under a supervisor, in the clean environment of a command job, with LEASEHOLD_JOB, LEASEHOLD_SCHEDULED_AT, LEASEHOLD_TOKEN, LEASEHOLD_ATTEMPT, LEASEHOLD_INSTANCE, LEASEHOLD_NAMESPACE and LEASEHOLD_ERROR (the error as recorded, secrets masked)."
	docHookHTTP    = "POST a JSON object {namespace, job, scheduled_at, attempt, token, instance, error} (Content-Type: application/json); any 2xx answer is success; no redirect is followed."
)

// fieldDoc documents one config field.
type fieldDoc struct {
	Doc      string
	Default  string   // as shown; "" = none
	Value    any      // the default as a JSON value, for the schema (nil = none or not literal)
	Unit     string   // "duration" for Go durations (30s, 5m, 1h30m), "bytes", …
	Example  string   // a YAML value
	Enum     []string // the values allowed, if a closed set
	Required bool
}

var configDocs = map[string]fieldDoc{
	"backend": {Doc: "Backend URL: sqlite:///abs/path.db, redis://user:pass@host:port/db (one Redis node), redis://user:pass@h1:7000?addr=h2:7000&addr=h3:7000 (a Redis Cluster: the host and each addr are seeds), redis://suser:spass@s1:26379?master_name=mymaster&addr=s2:26379&addr=s3:26379&password=pass (Sentinel: the userinfo is the Sentinels' password, password= the primary's), rediss://… for TLS in any form; wait_replicas=N&wait_timeout=200ms makes each Redis grant wait for N replicas (WAIT) before it is reported, so a failover cannot lose it — pair it with min-replicas-to-write N on the servers, see docs/redis.md, postgres://…, mysql://…, etcd://h1:2379,h2:2379/prefix, zk://h1:2181/prefix or memory://. ${NAME} is replaced by the environment variable NAME (an unset one is an error; $${ is a literal ${), so that a password need not be in the file. Logs and errors show the URL redacted: its password, credential-like parameters and the values of ${NAME}s whose names look like credentials (PASSWORD, TOKEN, SECRET, …) are masked.",
		Default: "a SQLite file leasehold.db next to the config", Example: `"redis://app:${REDIS_PASSWORD}@10.0.0.5:6379/0"`},
	"instance": {Doc: "This daemon's instance id: the holder name of its claims and leases. Only one daemon holds an id at a time.",
		Default: "the host name", Example: "web-1"},
	"namespace": {Doc: "Key namespace: daemons, locks and jobs of one namespace see each other, others not.",
		Default: "default", Value: "default", Example: "shop"},
	"grace": {Doc: "Shutdown grace: on SIGTERM running jobs get this long to finish, then they are stopped.",
		Default: "30s", Value: "30s", Unit: "duration", Example: "1m"},
	"retention": {Doc: "How long run history is kept.", Default: "168h (7 days)", Value: "168h", Unit: "duration", Example: "720h"},
	"jobs":      {Doc: "The jobs. Each needs exactly one of command and http."},

	"jobs[].name":     {Doc: "The job's name, unique in the namespace; no '!'.", Required: true, Example: "nightly-report"},
	"jobs[].schedule": {Doc: "Cron spec (5 fields, or 6 with seconds), @hourly/@daily/@weekly/@monthly/@yearly, @every DURATION, or CRON_TZ=Zone spec.", Required: true, Example: `"30 2 * * *"`},
	"jobs[].zone":     {Doc: "IANA time zone the cron spec is read in.", Default: "UTC", Example: "Europe/Paris"},
	"jobs[].mode": {Doc: "once: each occurrence claimed and run by exactly one daemon; leader: only the elected leader claims; every-instance: local cron, every daemon runs every occurrence, no claims.",
		Default: "once", Value: "once", Enum: []string{"once", "leader", "every-instance"}, Example: "leader"},
	"jobs[].misfire": {Doc: "What happens to occurrences not claimed on time (no daemon alive, a timer or claim later than misfire_grace): skip them, run the latest once, or run each (at most max_catch_up).",
		Default: "skip", Value: "skip", Enum: []string{"skip", "run-once", "run-all"}, Example: "run-once"},
	"jobs[].crash": {Doc: "What happens to an occurrence whose runner died: retry (another daemon reclaims it with a greater token, up to max_attempts: at-least-once) or skip (abandoned: at-most-once).",
		Default: "retry", Value: "retry", Enum: []string{"retry", "skip"}, Example: "skip"},
	"jobs[].timeout": {Doc: "Per-run limit; the run fails (timeout) past it. HTTP jobs without one time out after 5 minutes.",
		Default: "none (HTTP jobs: 5m)", Unit: "duration", Example: "10m"},
	"jobs[].jitter": {Doc: "Each run is delayed by a random span up to this; the occurrence's instant (its key) does not change.",
		Default: "0", Value: "0s", Unit: "duration", Example: "30s"},
	"jobs[].lease_ttl": {Doc: "The runner's lease on a claim; heartbeats renew it. A runner that dies is recovered once it expires.",
		Default: "30s", Value: "30s", Unit: "duration", Example: "1m"},
	"jobs[].max_concurrent": {Doc: "At most this many runs of the job hold leases at once across the cluster; 1 is no-overlap. 0 = no limit.",
		Default: "0", Value: 0, Example: "1"},
	"jobs[].max_attempts": {Doc: "Bound on the attempts of one occurrence (crashes and retried failures).",
		Default: "3, or 1+retry.max if more", Example: "5"},
	"jobs[].misfire_window": {Doc: "How far back catch-up looks for missed occurrences; shorter than retention.",
		Default: "1h", Value: "1h", Unit: "duration", Example: "6h"},
	"jobs[].misfire_grace": {Doc: "How late a run may start and still count as on time.",
		Default: "5s (or misfire_window if shorter)", Unit: "duration", Example: "30s"},
	"jobs[].max_catch_up": {Doc: "misfire run-all: at most this many missed occurrences are run.",
		Default: "10", Value: 10, Example: "4"},
	"jobs[].revision": {Doc: "Part of the schedule version: versions only move forward, so to return to a schedule that was replaced, give it a revision never used before.",
		Default: "0", Value: 0, Example: "2"},
	"jobs[].paused": {Doc: "The job starts paused: no daemon claims it until it is resumed (leasehold resume JOB, or the admin API). The state recorded then rules: a job resumed once stays resumed across restarts.",
		Default: "false", Value: false, Example: "true"},
	"jobs[].retry": {Doc: "Retry failed runs (not only crashed ones) after a backoff; each retry is a new attempt with a greater token."},
	"jobs[].retry.max": {Doc: "How many times a failed run is retried; 0 = a failure is final.",
		Default: "0", Value: 0, Example: "3"},
	"jobs[].retry.backoff": {Doc: "Wait before the first retry; each later one waits twice as long as the one before.",
		Default: "10s", Value: "10s", Unit: "duration", Example: "30s"},
	"jobs[].retry.max_backoff": {Doc: "Longest wait between retries.",
		Default: "10m (or backoff if longer)", Unit: "duration", Example: "1h"},
	"jobs[].command":      {Doc: "Run a program directly: an argv list, no shell, under a supervisor that owns its whole process tree (a cgroup v2 leaf where one can be made, else a process group and a subreaper: doctor says which), in a clean environment."},
	"jobs[].command.argv": {Doc: "The program and its arguments.", Required: true, Example: "[/usr/local/bin/send-report, --daily]"},
	"jobs[].command.env":  {Doc: "Variables the job gets besides PATH, HOME, LANG, TZ and the LEASEHOLD_* ones.", Example: "{MODE: full}"},
	"jobs[].command.env_passthrough": {Doc: "Variables of the daemon's environment the job also gets; the daemon's tokens and backend URL cannot be named.",
		Example: "[AWS_REGION]"},
	"jobs[].command.dir": {Doc: "Working directory.", Default: "the daemon's", Example: "/srv/reports"},
	"jobs[].command.max_output": {Doc: "Output kept in the run history (head and tail around a cut); 0..1048576.",
		Default: "4096", Unit: "bytes", Example: "65536"},
	"jobs[].http":         {Doc: "Call an HTTP endpoint; it gets Idempotency-Key, Leasehold-Token, Leasehold-Scheduled-At and Leasehold-Attempt headers."},
	"jobs[].http.method":  {Doc: "HTTP method.", Default: "GET", Value: "GET", Example: "POST"},
	"jobs[].http.url":     {Doc: "http(s) URL; its password and credential-like parameters are masked in logs and history.", Required: true, Example: `"http://127.0.0.1:8080/internal/warm"`},
	"jobs[].http.headers": {Doc: "Request headers; credential-like ones are masked in logs and history.", Example: `{Authorization: "Bearer …"}`},
	"jobs[].http.body":    {Doc: "Request body.", Example: `'{"full": true}'`},
	"jobs[].http.expect":  {Doc: "The status that counts as success.", Default: "any 2xx", Example: "204"},
	"jobs[].http.redirects": {Doc: "Which redirects are followed: same_origin (same scheme, host and port), none, or any (another origin gets none of headers). No redirect carries a Referer.",
		Default: "same_origin", Value: "same_origin", Example: "none"},

	"jobs[].on_failure":                         {Doc: docHook},
	"jobs[].on_failure.command":                 {Doc: docHookCommand},
	"jobs[].on_failure.command.argv":            {Doc: "The program and its arguments.", Required: true, Example: "[/usr/local/bin/page-oncall]"},
	"jobs[].on_failure.command.env":             {Doc: "Variables the hook gets besides PATH, HOME, LANG, TZ and the LEASEHOLD_* ones.", Example: "{TEAM: ops}"},
	"jobs[].on_failure.command.env_passthrough": {Doc: "Variables of the daemon's environment the hook also gets; the daemon's tokens and backend URL cannot be named.", Example: "[PAGER_ROUTING_KEY]"},
	"jobs[].on_failure.command.dir":             {Doc: "Working directory.", Default: "the daemon's", Example: "/srv/ops"},
	"jobs[].on_failure.http":                    {Doc: docHookHTTP},
	"jobs[].on_failure.http.url":                {Doc: "http(s) URL; its password and credential-like parameters are masked in logs.", Required: true, Example: `"https://alerts.example.com/hooks/leasehold"`},
	"jobs[].on_failure.http.headers":            {Doc: "Request headers (not Content-Type, Content-Length or Host); credential-like ones are masked in logs.", Example: `{Authorization: "Bearer …"}`},
	"jobs[].on_failure.timeout":                 {Doc: "How long one call of the hook may take (at most 10m); a command is then stopped (SIGTERM, SIGKILL 5 s later), a request abandoned.", Default: "30s", Value: "30s", Unit: "duration", Example: "10s"},

	"on_failure":                         {Doc: docHook + " This one is every job's default; a job's own on_failure replaces it."},
	"on_failure.command":                 {Doc: docHookCommand},
	"on_failure.command.argv":            {Doc: "The program and its arguments.", Required: true, Example: "[/usr/local/bin/page-oncall]"},
	"on_failure.command.env":             {Doc: "Variables the hook gets besides PATH, HOME, LANG, TZ and the LEASEHOLD_* ones.", Example: "{TEAM: ops}"},
	"on_failure.command.env_passthrough": {Doc: "Variables of the daemon's environment the hook also gets; the daemon's tokens and backend URL cannot be named.", Example: "[PAGER_ROUTING_KEY]"},
	"on_failure.command.dir":             {Doc: "Working directory.", Default: "the daemon's", Example: "/srv/ops"},
	"on_failure.http":                    {Doc: docHookHTTP},
	"on_failure.http.url":                {Doc: "http(s) URL; its password and credential-like parameters are masked in logs.", Required: true, Example: `"https://alerts.example.com/hooks/leasehold"`},
	"on_failure.http.headers":            {Doc: "Request headers (not Content-Type, Content-Length or Host); credential-like ones are masked in logs.", Example: `{Authorization: "Bearer …"}`},
	"on_failure.timeout":                 {Doc: "How long one call of the hook may take (at most 10m); a command is then stopped (SIGTERM, SIGKILL 5 s later), a request abandoned.", Default: "30s", Value: "30s", Unit: "duration", Example: "10s"},

	"http": {Doc: "The admin API and dashboard."},
	"http.listen": {Doc: "host:port, or off. When the default address is taken, a daemon with configured tokens runs without the API (a warning); one using its generated admin token does so only if the listener there proves it holds that token (another daemon on the same database), and otherwise stops with an error; an address given explicitly must be free.",
		Default: "127.0.0.1:7070", Value: "127.0.0.1:7070", Example: `"0.0.0.0:7443"`},
	"http.tls_cert":           {Doc: "PEM certificate file; with tls_key, serve HTTPS. Relative to the config's directory.", Example: "tls/cert.pem"},
	"http.tls_key":            {Doc: "PEM key file of tls_cert.", Example: "tls/key.pem"},
	"http.tokens":             {Doc: "Bearer tokens, besides $LEASEHOLD_ADMIN_TOKEN and $LEASEHOLD_READ_TOKEN. With none, the daemon generates an admin token into a file of mode 0600 next to its SQLite database (else next to the config)."},
	"http.tokens[].scope":     {Doc: "read (the GET endpoints) or admin (also trigger, pause, resume, resign).", Required: true, Enum: []string{"read", "admin"}, Example: "read"},
	"http.tokens[].token":     {Doc: "The secret itself (at least 16 bytes); give token or token_env.", Example: "…"},
	"http.tokens[].token_env": {Doc: "The name of an environment variable holding the secret.", Example: "LEASEHOLD_DASHBOARD_TOKEN"},
	"http.open_reads": {Doc: "Let the GET endpoints answer without a token, on a loopback listener only; actions still need an admin token.",
		Default: "false", Value: false, Example: "true"},

	"log":        {Doc: "The daemon's log (standard error)."},
	"log.format": {Doc: "Log format.", Default: "text", Value: "text", Enum: []string{"text", "json"}, Example: "json"},
	"log.level":  {Doc: "Lowest level logged.", Default: "info", Value: "info", Enum: []string{"debug", "info", "warn", "error"}, Example: "debug"},
}

// ExampleConfig is the example of docs/config.md; a test parses it and
// checks it against the schema.
const ExampleConfig = `backend: "redis://app:${REDIS_PASSWORD}@127.0.0.1:6379/0"
instance: web-1
namespace: shop
grace: 1m
jobs:
  - name: nightly-report
    schedule: "30 2 * * *"
    zone: Europe/Paris
    crash: retry
    timeout: 30m
    command:
      argv: [/usr/local/bin/send-report, --daily]
      env: {MODE: full}
    on_failure:
      timeout: 10s
      command: {argv: [/usr/local/bin/page-oncall, --team, reports]}
  - name: warm-cache
    schedule: "@every 5m"
    max_concurrent: 1
    retry: {max: 3, backoff: 10s, max_backoff: 10m}
    http: {method: POST, url: "http://127.0.0.1:8080/internal/warm", expect: 204}
  - name: reindex
    schedule: "@daily"
    mode: leader
    paused: true
    command: {argv: [/usr/local/bin/reindex]}
http:
  listen: 127.0.0.1:7070
  tokens:
    - {scope: read, token_env: LEASEHOLD_DASHBOARD_TOKEN}
log: {format: json, level: info}
`
