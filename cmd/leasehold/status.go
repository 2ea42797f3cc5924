package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/open"
)

// EnvAPIToken holds the bearer token "leasehold status" sends when --token
// is not given.
const EnvAPIToken = "LEASEHOLD_API_TOKEN"

func newStatusCmd(a *app) *cobra.Command {
	var f apiFlags
	var runs int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--config leasehold.yaml | --api URL]",
		Short: "Show a running daemon's instances, leaders, locks, jobs and last runs",
		Long: `Read the admin API of a running "leasehold run" daemon and print its
namespace's instances, election leaders, held locks, jobs and last runs.
The token needs the read scope.

` + apiHelp + `

Fencing tokens are printed in decimal; with --json the API's status document
is printed as is (tokens as JSON strings).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 0 || runs > 1000 {
				return usageErrorf("--runs %d: must be in 0..1000", runs)
			}
			api, err := a.dialAdmin(cmd, &f, admin.ScopeRead)
			if err != nil {
				return err
			}
			body, err := api.call(cmd.Context(), "GET", "/api/v1/status", url.Values{"runs": {strconv.Itoa(runs)}})
			if err != nil {
				return &exitError{code: ExitInternal, err: err}
			}
			if asJSON {
				_, err := a.stdout.Write(body)
				return err
			}
			var st admin.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return &exitError{code: ExitInternal, err: fmt.Errorf("%s: the answer is not a status document: %w", api.shown, err)}
			}
			return printStatus(a.stdout, &st)
		},
	}
	f.add(cmd)
	cmd.Flags().IntVar(&runs, "runs", 10, "how many last runs to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

// generatedToken reads the admin token a daemon generated, from the file
// next to the database of cfg's backend (--config) or, without cfg, of the
// CLI's backend. A missing file is no token; a file others may read is an
// error.
func (a *app) generatedToken(cfg *daemon.Config) (token, path string, err error) {
	if cfg != nil {
		path = cfg.AdminTokenFile()
	} else {
		raw := a.backendURL
		if raw == "" {
			raw = os.Getenv(open.EnvBackend)
		}
		if raw == "" {
			if raw, err = open.DefaultURL(); err != nil {
				return "", "", nil // no default backend: no token file either
			}
		}
		path = daemon.AdminTokenFile(raw, "")
	}
	if path == "" {
		return "", "", nil
	}
	token, err = daemon.ReadAdminToken(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", path, nil
	}
	if err != nil {
		return "", path, &exitError{code: ExitInternal, err: err}
	}
	return token, path, nil
}

// configListener returns the URL of the admin API a daemon with cfg
// serves: http.listen (the default address if the config names none; the
// daemon's --http is not known here), https when the config has a TLS
// certificate; an unspecified host (0.0.0.0, ::) is reached on loopback.
func configListener(cfg *daemon.Config) (*url.URL, error) {
	addr := cfg.HTTP.Listen
	if addr == "" {
		addr = admin.DefaultAddress
	}
	if addr == daemon.HTTPOff {
		return nil, fmt.Errorf("http.listen is %q: the daemon serves no admin API", daemon.HTTPOff)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: %v", addr, err)
	}
	if port == "0" || port == "" {
		return nil, fmt.Errorf("http.listen %q: the daemon picks a free port when it starts", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "http"
	if cfg.HTTP.TLSCert != "" {
		scheme = "https"
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}, nil
}

// sameListener reports whether the API URL u reaches the listener l: the
// same scheme, host (a name as written, an IP address in any notation) and
// port (the scheme's default if u names none).
func sameListener(u, l *url.URL) bool {
	if u == nil || l == nil || !strings.EqualFold(u.Scheme, l.Scheme) {
		return false
	}
	port := func(v *url.URL) string {
		if p := v.Port(); p != "" {
			return p
		}
		if strings.EqualFold(v.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	if port(u) != port(l) {
		return false
	}
	uh, lh := u.Hostname(), l.Hostname()
	if strings.EqualFold(uh, lh) {
		return true
	}
	ui, li := net.ParseIP(uh), net.ParseIP(lh)
	return ui != nil && li != nil && ui.Equal(li)
}

func printStatus(w io.Writer, st *admin.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "namespace %s, served by %s at %s\n", cell(st.Namespace), cell(st.Instance), cell(st.Now))
	fmt.Fprintln(tw, "\nINSTANCE\tSTATE\tREMAINING\tLAST SEEN")
	for _, i := range st.Instances {
		state, left := "alive", (time.Duration(i.LeaseRemainingMS) * time.Millisecond).String()
		if !i.Alive {
			state, left = "gone", "-"
		}
		name := i.Instance
		if i.Self {
			name += " (this)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(name), state, left, cell(i.LastSeen))
	}
	fmt.Fprintln(tw, "\nROLE\tLEADER\tTOKEN\tSINCE")
	for _, l := range st.Leaders {
		since := l.Since
		if l.SinceObserved {
			since = "seen " + since
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(l.Role), cell(l.Instance), l.Token, cell(since))
	}
	fmt.Fprintln(tw, "\nKEY\tKIND\tINSTANCE\tTOKEN\tREMAINING") // as "leasehold locks" shows them
	for _, k := range st.Locks {
		kind := k.Kind
		if kind == "" { // a daemon from before kinds were reported
			kind = lockKind(k.Key)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(k.Key), cell(kind), cell(k.Instance), k.Token, roundRemaining(time.Duration(k.RemainingMS)*time.Millisecond))
	}
	fmt.Fprintln(tw, "\nJOB\tSCHEDULE\tMODE\tSTATE\tNEXT (UTC)\tLAST CLAIMED")
	for _, j := range st.Jobs {
		state, next, last := "active", "-", j.LastClaimed
		if j.Paused {
			state = "paused"
		}
		switch {
		case j.VersionRefused || j.State == admin.JobRefused:
			state = "REFUSED (old config: superseded by version " + cell(j.CurrentVersion) + ")" // from the ledger, unchecked
		case j.State != "":
			state = cell(j.State)
		}
		if j.Cluster != nil && !j.Cluster.Running && !j.Paused {
			state += ", NOT RUNNING ANYWHERE"
		}
		if len(j.Next) > 0 && j.State != admin.JobSuperseded && j.State != admin.JobRefused && !j.VersionRefused {
			next = j.Next[0] // a daemon whose version does not apply claims none of its next instants
		}
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(j.Name), cell(j.Schedule), cell(j.Mode), state, cell(next), cell(last))
	}
	// Why a job is not active here, or runs nowhere, and what to do.
	var notes []string
	for _, j := range st.Jobs {
		if j.StateNote != "" {
			notes = append(notes, "job "+cell(j.Name)+": "+cell(j.StateNote))
		}
		if j.Cluster != nil && j.Cluster.Note != "" && !j.Paused {
			notes = append(notes, "job "+cell(j.Name)+": "+cell(j.Cluster.Note))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(tw, "  %s\n", n)
	}
	fmt.Fprintln(tw, "\nSCHEDULED (UTC)\tJOB\tSTATE\tINSTANCE\tTOKEN\tATTEMPT\tTOOK\tERROR")
	for _, r := range st.Runs {
		state := r.State
		if r.Expired {
			state += " (runner's lease expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%v\t%s\n", cell(r.ScheduledAt), cell(r.Job), cell(state), cell(r.Instance), r.Token, r.Attempt,
			time.Duration(r.DurationMS)*time.Millisecond, oneLine(r.Error, 60))
	}
	return tw.Flush()
}
