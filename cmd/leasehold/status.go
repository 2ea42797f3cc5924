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
	"net"
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
	"github.com/leasehold/leasehold/internal/redact"
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
leasehold.admin-token next to --config for other backends.

With --config and no --api, the API is the config's http.listen (https when
the config has tls_cert; the default address if it names none; 0.0.0.0 or ::
is reached on loopback), and the config's tls_cert is trusted for it. A token
read from the file is sent to that listener only: an --api that is not the
config's http.listen is refused unless the token comes from --token or
$` + EnvAPIToken + `. (When the config names no http.listen, the daemon's --http is
not known, and --api is taken as its address.)

Fencing tokens are printed in decimal; with --json the API's status document
is printed as is (tokens as JSON strings).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 0 || runs > 1000 {
				return usageErrorf("--runs %d: must be in 0..1000", runs)
			}
			a.noteSecrets(apiURL) // its userinfo, in whatever form an error repeats it
			shown := redact.URL(apiURL)
			u, err := url.Parse(apiURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErrorf("--api %q: not an http(s) URL such as http://127.0.0.1:7070", shown)
			}
			var cfg *daemon.Config
			var listener *url.URL // the config's admin API, nil if unknown
			if config != "" {
				if cfg, err = a.loadConfig(cmd, config); err != nil {
					return err
				}
				if listener, err = configListener(cfg); err != nil && !cmd.Flags().Changed("api") {
					return usageErrorf("--config %s: %v; give --api", config, err)
				}
				if !cmd.Flags().Changed("api") {
					u, shown = listener, listener.String()
				}
			}
			if token == "" {
				token = os.Getenv(EnvAPIToken)
			}
			tokenFile := ""
			if token == "" {
				if token, tokenFile, err = a.generatedToken(cfg); err != nil {
					return err
				}
				// The generated token goes to the config's listener only:
				// whoever else listens on --api must not receive it.
				if token != "" && cfg != nil && !sameListener(u, listener) && cfg.ListenNamed() {
					where := "its http.listen is unknown"
					if listener != nil {
						where = "it listens on " + listener.String()
					}
					return usageErrorf("--api %s is not the admin API of --config %s (%s): the admin token read from %s is sent to that API only; give --token or $%s to talk to another address",
						redact.URL(u.String()), config, where, tokenFile, EnvAPIToken)
				}
			}
			client := &http.Client{Timeout: 30 * time.Second}
			switch {
			case caFile != "":
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return usageErrorf("--cacert: %v", err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return usageErrorf("--cacert %q: no PEM certificate in it", caFile)
				}
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			case cfg != nil && cfg.HTTP.TLSCert != "" && u.Scheme == "https" && sameListener(u, listener):
				// The daemon's own certificate is trusted for its listener
				// (as well as the system's roots), if we may read it.
				if pem, err := os.ReadFile(cfg.HTTP.TLSCert); err == nil {
					pool, err := x509.SystemCertPool()
					if err != nil {
						pool = x509.NewCertPool()
					}
					if pool.AppendCertsFromPEM(pem) {
						client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
					}
				}
			}
			body, err := fetchStatus(cmd.Context(), client, u, token, runs)
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
				return &exitError{code: ExitInternal, err: fmt.Errorf("%s: the answer is not a status document: %w", shown, err)}
			}
			return printStatus(a.stdout, &st)
		},
	}
	cmd.Flags().StringVar(&apiURL, "api", "http://"+admin.DefaultAddress, "admin API `URL` of a running daemon (with --config: its http.listen)")
	cmd.Flags().StringVar(&token, "token", "", "bearer `token` (default $"+EnvAPIToken+")")
	cmd.Flags().StringVar(&config, "config", "", "the daemon's config `file`: read the admin token it generated next to its database")
	cmd.Flags().StringVar(&caFile, "cacert", "", "PEM `file` of the CA (or self-signed certificate) to trust for https")
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

// fetchStatus GETs the status document from the admin API at u. Errors
// show u without its userinfo.
func fetchStatus(ctx context.Context, client *http.Client, u *url.URL, token string, runs int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/status?runs=%d", strings.TrimSuffix(u.String(), "/"), runs), nil)
	if err != nil {
		return nil, fmt.Errorf("admin API %s: %w", redact.URL(u.String()), err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w (is \"leasehold run\" running with --http %s?)", err, u.Host)
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
	fmt.Fprintln(tw, "\nLOCK\tKIND\tHOLDER\tTOKEN\tLEFT")
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
		if j.VersionRefused {
			state = "REFUSED (old config: superseded by version " + j.CurrentVersion + ")"
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
