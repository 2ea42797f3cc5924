package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
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
	var apiURL, token, caFile, config string
	var runs int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--api URL]",
		Short: "Show a running daemon's instances, leaders, locks, jobs and last runs",
		Long: `Read the admin API of a running "leasehold run" daemon and print its
namespace's instances, election leaders, held locks, jobs and last runs.

The token (--token, default $` + EnvAPIToken + `) is sent as a bearer token; it
needs the read scope. Without either, the admin token a daemon generated is
read from its file: next to the SQLite database of --config's backend (or of
--backend, $LEASEHOLD_BACKEND or the default), as <database>.admin-token, or
leasehold.admin-token next to --config for other backends. Fencing tokens are printed in decimal; with --json the
API's status document is printed as is (tokens as JSON strings).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 0 || runs > 1000 {
				return usageErrorf("--runs %d: must be in 0..1000", runs)
			}
			u, err := url.Parse(apiURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErrorf("--api %q: not an http(s) URL such as http://127.0.0.1:7070", apiURL)
			}
			if token == "" {
				token = os.Getenv(EnvAPIToken)
			}
			tokenFile := ""
			if token == "" {
				if token, tokenFile, err = a.generatedToken(cmd, config); err != nil {
					return err
				}
			}
			client := &http.Client{Timeout: 30 * time.Second}
			if caFile != "" {
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return usageErrorf("--cacert: %v", err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return usageErrorf("--cacert %q: no PEM certificate in it", caFile)
				}
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			}
			body, err := fetchStatus(cmd.Context(), client, strings.TrimSuffix(apiURL, "/"), token, runs)
			if err != nil && token == "" {
				err = fmt.Errorf("%w (no token: give --token or $%s, or --config of the daemon; no token file at %q)", err, EnvAPIToken, tokenFile)
			}
			if err != nil {
				return &exitError{code: ExitInternal, err: err}
			}
			if asJSON {
				_, err := a.stdout.Write(body)
				return err
			}
			var st admin.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return &exitError{code: ExitInternal, err: fmt.Errorf("%s: the answer is not a status document: %w", apiURL, err)}
			}
			return printStatus(a.stdout, &st)
		},
	}
	cmd.Flags().StringVar(&apiURL, "api", "http://"+admin.DefaultAddress, "admin API `URL` of a running daemon")
	cmd.Flags().StringVar(&token, "token", "", "bearer `token` (default $"+EnvAPIToken+")")
	cmd.Flags().StringVar(&config, "config", "", "the daemon's config `file`: read the admin token it generated next to its database")
	cmd.Flags().StringVar(&caFile, "cacert", "", "PEM `file` of the CA (or self-signed certificate) to trust for https")
	cmd.Flags().IntVar(&runs, "runs", 10, "how many last runs to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

// generatedToken reads the admin token a daemon generated, from the file
// next to the database of --config's backend or of the CLI's backend. A
// missing file is no token; a file others may read is an error.
func (a *app) generatedToken(cmd *cobra.Command, config string) (token, path string, err error) {
	if config != "" {
		cfg, err := a.loadConfig(cmd, config)
		if err != nil {
			return "", "", err
		}
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

func fetchStatus(ctx context.Context, client *http.Client, base, token string, runs int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/status?runs=%d", base, runs), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w (is \"leasehold run\" running with --http %s?)", err, strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://"))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("admin API answered %s: %s", resp.Status, e.Error)
		}
		return nil, fmt.Errorf("admin API answered %s", resp.Status)
	}
	return body, nil
}

func printStatus(w io.Writer, st *admin.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "namespace %s, served by %s at %s\n", cell(st.Namespace), cell(st.Instance), cell(st.Now))
	fmt.Fprintln(tw, "\nINSTANCE\tSTATE\tLEASE LEFT\tLAST SEEN")
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
	fmt.Fprintln(tw, "\nLOCK\tHOLDER\tTOKEN\tLEFT")
	for _, k := range st.Locks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(k.Key), cell(k.Instance), k.Token, roundRemaining(time.Duration(k.RemainingMS)*time.Millisecond))
	}
	fmt.Fprintln(tw, "\nJOB\tSCHEDULE\tMODE\tSTATE\tNEXT (UTC)\tLAST CLAIMED")
	for _, j := range st.Jobs {
		state, next, last := "active", "-", j.LastClaimed
		if j.Paused {
			state = "paused"
		}
		if len(j.Next) > 0 {
			next = j.Next[0]
		}
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(j.Name), cell(j.Schedule), cell(j.Mode), state, cell(next), cell(last))
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
