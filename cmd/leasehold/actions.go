package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// The actions a daemon's admin API takes: trigger, pause, resume, resign.

const actionExitHelp = `Exit codes: 0 done; 64 bad arguments, or the daemon has no such job or
role (the API answered 400 or 404); 75 refused (409: a trigger key used
before, the job paused or at its concurrency limit, the daemon not the
leader); 70 anything else (no daemon, a bad token, a backend error).`

// actionCmd is the shape of every action command: one argument, a POST
// to path(arg) with the query, and a line to print from the API's answer.
type actionCmd struct {
	use, short, long string
	path             func(arg string) string
	query            func() url.Values
	say              func(answer map[string]any) string
}

func newActionCmd(a *app, spec actionCmd, more func(cmd *cobra.Command)) *cobra.Command {
	var f apiFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   spec.use,
		Short: spec.short,
		Long:  spec.long + "\n\n" + apiHelp + "\n\n" + actionExitHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usageErrorf("the argument is empty")
			}
			api, err := a.dialAdmin(cmd, &f, admin.ScopeAdmin)
			if err != nil {
				return err
			}
			var q url.Values
			if spec.query != nil {
				q = spec.query()
			}
			body, err := api.call(cmd.Context(), http.MethodPost, spec.path(args[0]), q)
			if err != nil {
				return &exitError{code: actionExit(err), err: err}
			}
			if asJSON {
				_, err := a.stdout.Write(body)
				return err
			}
			var answer map[string]any
			if err := json.Unmarshal(body, &answer); err != nil {
				return &exitError{code: ExitInternal, err: fmt.Errorf("%s: the answer is not JSON: %w", api.shown, err)}
			}
			fmt.Fprintln(a.stdout, spec.say(answer))
			return nil
		},
	}
	f.add(cmd)
	if strings.Contains(spec.use, " JOB") {
		cmd.ValidArgsFunction = completeJobs(a, &f)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	if more != nil {
		more(cmd)
	}
	return cmd
}

// actionExit is the exit code for an API answer that is not a success.
func actionExit(err error) int {
	var ae *apiError
	if !errors.As(err, &ae) {
		return ExitInternal
	}
	switch ae.status {
	case http.StatusBadRequest, http.StatusNotFound:
		return ExitUsage
	case http.StatusConflict:
		return ExitNotAcquired
	}
	return ExitInternal
}

// jobPath is the API path of a job's action; the name is escaped as one
// path segment (a "/" in it included).
func jobPath(action string) func(string) string {
	return func(job string) string { return "/api/v1/jobs/" + url.PathEscape(job) + "/" + action }
}

func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return cell(v)
	case nil:
		return ""
	default:
		return cell(fmt.Sprint(v))
	}
}

func newTriggerCmd(a *app) *cobra.Command {
	var key string
	return newActionCmd(a, actionCmd{
		use:   "trigger JOB [--key KEY]",
		short: "Run a job of a running daemon now, once per key",
		long: `Ask a running daemon to run JOB now ("run now"). The run is a run of the job:
its fencing token continues the job's sequence and it is in the job's history
("leasehold runs" marks it). KEY makes the trigger idempotent: a key is used
once, and a second trigger with it is refused (exit 75) and runs nothing;
without --key the daemon makes one up. A paused job, or one at its
max_concurrent, refuses the trigger and the key stays free.`,
		path: jobPath("trigger"),
		query: func() url.Values {
			if key == "" {
				return nil
			}
			return url.Values{"key": {key}}
		},
		say: func(m map[string]any) string {
			return fmt.Sprintf("triggered job %s: key %s, scheduled at %s, token %s (leasehold runs --job %s)",
				str(m, "job"), str(m, "key"), str(m, "scheduled_at"), str(m, "token"), str(m, "job"))
		},
	}, func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&key, "key", "", "idempotency `key` of the trigger (default: a new one)")
	})
}

func newPauseCmd(a *app) *cobra.Command {
	return newActionCmd(a, actionCmd{
		use:   "pause JOB",
		short: "Pause a job on every daemon of the namespace",
		long: `Pause JOB: the state is kept in the backend, so no daemon of the namespace
claims its occurrences until "leasehold resume". An occurrence already
claimed or running goes on. Pausing a paused job changes nothing.`,
		path: jobPath("pause"),
		say:  func(m map[string]any) string { return "paused job " + str(m, "job") },
	}, nil)
}

func newResumeCmd(a *app) *cobra.Command {
	return newActionCmd(a, actionCmd{
		use:   "resume JOB",
		short: "Resume a paused job on every daemon of the namespace",
		long: `Resume JOB (paused by "leasehold pause", the admin API, or paused: true in
the config): every daemon of the namespace claims its occurrences again.
Occurrences that passed while it was paused are handled by its misfire
policy.`,
		path: jobPath("resume"),
		say:  func(m map[string]any) string { return "resumed job " + str(m, "job") },
	}, nil)
}

func newResignCmd(a *app) *cobra.Command {
	return newActionCmd(a, actionCmd{
		use:   "resign ROLE",
		short: "Make a daemon give up the leadership of a role",
		long: `Ask a running daemon to resign ROLE (its scheduler's role is ` + schedule.LeaderRole + `),
so that another daemon is elected. The daemon asked must be the leader (exit
75 otherwise: ask the leader's API, which "leasehold status" names). ROLE
is sent as one path segment: a "/" in it needs no escaping.`,
		path: func(role string) string { return "/api/v1/leaders/" + url.PathEscape(role) + "/resign" },
		say: func(m map[string]any) string {
			return fmt.Sprintf("instance %s resigned role %s", str(m, "instance"), str(m, "role"))
		},
	}, nil)
}

// completeJobs completes a JOB argument in shells (leasehold completion):
// the jobs of --config's file when given, else those the daemon at --api
// lists (with the token the command would send, read scope). It never
// fails a completion: no names is the answer when neither is at hand.
func completeJobs(a *app, f *apiFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		if f.config != "" {
			if cfg, err := a.loadConfig(cmd, f.config); err == nil {
				for _, j := range cfg.Jobs {
					names = append(names, j.Name)
				}
			}
		} else if api, err := a.dialAdmin(cmd, f, admin.ScopeRead); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if body, err := api.call(ctx, "GET", "/api/v1/jobs", url.Values{"next": {"0"}}); err == nil {
				var list struct {
					Jobs []admin.Job `json:"jobs"`
				}
				if json.Unmarshal(body, &list) == nil {
					for _, j := range list.Jobs {
						names = append(names, j.Name)
					}
				}
			}
		}
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
