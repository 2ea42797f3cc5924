package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	bopen "github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/internal/redact"
)

// redactText masks URL passwords and credential-like name=value pairs left
// in a message (a URL some library repeated in another form).
func redactText(s string) string { return redact.Text(s) }

// Exit codes of leasehold, from sysexits.h where one fits. A command run by
// "leasehold lock" passes its own exit code through instead (128+N if it was
// killed by signal N).
const (
	// ExitUsage: bad command line (unknown flag or command, bad flag value,
	// bad key or backend URL). EX_USAGE.
	ExitUsage = 64
	// ExitInternal: the backend failed or an outcome could not be known.
	// EX_SOFTWARE.
	ExitInternal = 70
	// ExitNotAcquired: the lock is held by someone else and --nonblock was
	// given or --wait ran out. EX_TEMPFAIL.
	ExitNotAcquired = 75
	// ExitLeaseLost: the lease was lost (or could no longer be known to be
	// held) while the command ran; the command was killed. It takes
	// precedence over the command's own exit code.
	ExitLeaseLost = 76
	// ExitCannotExec: the command was found but could not be executed (as sh).
	ExitCannotExec = 126
	// ExitNotFound: the command was not found (as sh).
	ExitNotFound = 127
)

const exitCodesHelp = `Exit codes:
  CMD's own     lock: the command's exit code, or 128+N if signal N killed it
  64            usage error (bad flag, flag value, key or backend URL)
  70            internal or backend error
  75            not acquired: the key is held and --nonblock was given or --wait ran out
  76            lease lost while the command ran (the command was killed);
                takes precedence over the command's exit code
  126, 127      lock: the command could not be executed / was not found`

// app holds what the commands share: the standard streams and the values of
// the persistent flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	backendURL string
	namespace  string
	instance   string

	started bool // a command's Run began: later errors are not usage errors

	// scrub masks the secrets of the backend URLs and config in use in
	// everything leasehold prints (backend errors may repeat a URL).
	scrub *redact.Scrubber
}

// noteSecrets adds the secrets of a backend URL to what a.scrub masks.
func (a *app) noteSecrets(rawURL string) { a.scrub = a.scrub.Add(redact.Secrets(rawURL)...) }

// exitError ends leasehold with code, printing err if it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// run executes leasehold with args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	failed, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	code := ExitInternal
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		err = ee.err
	case !a.started:
		code = ExitUsage // cobra: unknown command or flag, bad arguments
	}
	if err != nil {
		a.noteSecrets(os.Getenv(open.EnvBackend))
		a.noteSecrets(a.backendURL)
		fmt.Fprintf(stderr, "leasehold: %s\n", message(redactText(a.scrub.Text(err.Error()))))
		if code == ExitUsage && !a.started && failed != nil {
			// Only where cobra refused the command line (an unknown
			// command or flag, wrong arguments): the message of a command
			// that ran (a 404, a bad value) says what to do itself.
			fmt.Fprintf(stderr, "leasehold: run \"%s --help\" for usage\n", failed.CommandPath())
		}
	}
	return code
}

// newRootCmd builds the command tree.
func newRootCmd(a *app) *cobra.Command {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	root := &cobra.Command{
		Use:   "leasehold",
		Short: "Cluster-wide locks with fencing tokens, and cron whose occurrences are claimed once",
		Long: `leasehold runs commands under cluster-wide locks and shows the leases a
backend holds.

A lock is a lease that leasehold renews while the command runs. Each grant
carries a fencing token (in $LEASEHOLD_TOKEN) that is greater than every token
granted before on the key. No lock service can stop a paused process from
acting after its lease expired; leasehold kills the command when it can no
longer be sure it holds the lease, and a resource that rejects tokens lower
than the highest it has seen is protected from a stale holder.

Backends (--backend URL, default $LEASEHOLD_BACKEND, else
$XDG_STATE_HOME/leasehold/leasehold.db, or ~/.local/state/leasehold/leasehold.db);
"leasehold doctor" shows what the one in use guarantees, and why:
` + bopen.Help() + `
` + exitCodesHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.started = true
			if err := leasehold.ValidatePath("namespace", a.namespace); err != nil {
				return usageErrorf("--namespace %q: %v", a.namespace, err)
			}
			if a.instance == "" || len(a.instance) > backend.MaxInstanceLen {
				return usageErrorf("--instance %q: must be 1–%d bytes", a.instance, backend.MaxInstanceLen)
			}
			return nil
		},
	}
	if v, err := versionText(); err == nil {
		root.Version = v // --version prints what "leasehold version" does
		root.SetVersionTemplate("{{.Version}}")
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.backendURL, "backend", "", "backend `URL`: "+strings.Join(bopen.Schemes(), ", ")+" or a SQLite path (default $"+open.EnvBackend+", else a SQLite file in $XDG_STATE_HOME/leasehold)")
	pf.StringVar(&a.namespace, "namespace", leasehold.DefaultNamespace, "key `namespace`")
	pf.StringVar(&a.instance, "instance", host, "instance `name` shown as the holder")

	root.AddCommand(newLockCmd(a), newLocksCmd(a), newRunCmd(a), newJobsCmd(a), newRunsCmd(a), newDemoCmd(a), newDemoJobCmd(a), newVersionCmd(a), newStatusCmd(a), newDoctorCmd(a),
		newTriggerCmd(a), newPauseCmd(a), newResumeCmd(a), newResignCmd(a))
	return root
}

// openBackend opens the backend named by --backend (or the default).
func (a *app) openBackend(ctx context.Context) (backend.Leases, error) {
	raw := a.backendURL
	a.noteSecrets(raw)
	if raw == "" {
		var err error
		if raw, err = open.DefaultURL(); err != nil {
			return nil, &exitError{code: ExitInternal, err: err}
		}
	}
	b, err := open.Open(ctx, raw)
	switch {
	case errors.Is(err, backend.ErrInvalid):
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("--backend: %w", err)}
	case err != nil:
		return nil, &exitError{code: ExitInternal, err: err}
	}
	return b, nil
}

// ledgerOf returns l as a backend with a run ledger, or a usage error
// naming the backend (and closes l) when it keeps none.
func ledgerOf(l backend.Leases) (backend.Backend, error) {
	b, err := backend.LedgerOf(l)
	if err != nil {
		l.Close()
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("--backend: %w", err)}
	}
	return b, nil
}
