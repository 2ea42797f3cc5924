package checker

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/chaos/history"
)

// Files the checker writes next to the run's.
const (
	ReportJSON   = "report.json"
	ReportText   = "report.txt"
	ReportHTML   = "report.html"   // the summary, linking the timeline
	TimelineHTML = "timeline.html" // porcupine's view of the lease operations, with faults, runs and sink rejections
)

// Summary is the report as text.
func (r *Report) Summary() string {
	var b strings.Builder
	run := r.Run
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "chaos %s: backend %s (%s), %d workers, %v, seed %d%s\n", verdict, run.Backend, run.Capabilities.Name,
		run.Instances, run.Duration, run.Seed, map[bool]string{true: ", NEGATIVE CONTROL (broken backend)"}[run.Broken])
	fmt.Fprintf(&b, "  declared: SafeFencing=%v DurableFencing=%v ServerClock=%v; ttl %v, job every %v (work %v)\n",
		run.Capabilities.SafeFencing, run.Capabilities.DurableFencing, run.Capabilities.ServerClock, run.TTL, run.JobEvery, run.JobWork)
	kinds := map[string]int{}
	for _, f := range run.Applied {
		kinds[f.Kind]++
	}
	fmt.Fprintf(&b, "  faults applied: %d %v\n", len(run.Applied), sortedCounts(kinds))
	for _, n := range run.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "  occurrences: %d expected, %d took effect at the fenced sink, %d missed (%d of them during a fault; longest run of misses %v)\n",
		r.Expected, r.Ran, len(r.Missed), r.MissedInFault, r.LongestMiss)
	var unexplained int
	for _, d := range r.FencedDuplicates {
		if !d.Explained {
			unexplained++
		}
	}
	fmt.Fprintf(&b, "  fenced sink: %d accepted, %d rejected (stale holders caught; %d on lock keys); duplicates %d (%d unexplained, %d re-executions after a lost lease)\n",
		r.FencedAccepted, r.FencedRejected, r.RejectedLocks, len(r.FencedDuplicates), unexplained, len(r.FencedDuplicates)-unexplained)
	fmt.Fprintf(&b, "  unfenced log: %d occurrences took effect more than once; for %d of them the fenced sink kept one\n",
		r.UnfencedDuplicates, r.CaughtByFencing)
	fmt.Fprintf(&b, "  token regressions: %d; overlapping lease grants: %d\n", len(r.Regressions), len(r.Overlaps))
	fmt.Fprintf(&b, "  executions: %d ran though claimed past the misfire grace %v, %d ran though a clock step jumped over them; %d times one occurrence ran twice at once (%d explained: a stale run after a lost lease), %d times a job exceeded its max_concurrent (%d explained); %d leases answered lost while renewed in time\n",
		len(r.LateStarts), run.JobGrace, len(r.JumpedOverRan), len(r.ExecOverlaps), explained(r.ExecOverlaps), len(r.LimitExceeded), explained(r.LimitExceeded), len(r.LostInTime))
	fmt.Fprintf(&b, "  linearizability (porcupine, expiry-aware lease model, %d lease ops): %s\n", r.LeaseOps, r.Linearizable)
	if r.StraddlingRestart > 0 {
		fmt.Fprintf(&b, "    each span between restarts of the non-durable backend checked from an empty state; %d ops overlapping a restart taken as indeterminate on both sides\n", r.StraddlingRestart)
	}
	fmt.Fprintf(&b, "  ops: %s\n", opsLine(r.Ops))
	for _, p := range r.Predicted {
		fmt.Fprintf(&b, "  predicted anomaly: %s\n", p)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "  WARNING: %s\n", w)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "  FAILURE: %s\n", f)
	}
	return b.String()
}

func explained(os []ExecOverlap) int {
	n := 0
	for _, o := range os {
		if o.Explained {
			n++
		}
	}
	return n
}

func sortedCounts(m map[string]int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func opsLine(ops map[string]map[string]int) string {
	var ks []string
	for k := range ops {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, k+"{"+sortedCounts(ops[k])+"}")
	}
	return strings.Join(parts, " ")
}

func (c *check) write(dir string, info porcupine.LinearizationInfo) error {
	raw, err := json.MarshalIndent(c.r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportJSON), raw, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportText), []byte(c.r.Summary()), 0o644); err != nil {
		return err
	}
	info.AddAnnotations(c.annotations())
	f, err := os.Create(filepath.Join(dir, TimelineHTML))
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(c.leaseModel(), info, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	f, err = os.Create(filepath.Join(dir, ReportHTML))
	if err != nil {
		return err
	}
	defer f.Close()
	return summaryPage.Execute(f, struct {
		R        *Report
		Text     string
		Faults   []faultRow
		Timeline string
	}{c.r, c.r.Summary(), c.faultRows(), TimelineHTML})
}

type faultRow struct {
	At, Took     string
	Kind, Target string
	Detail       string
}

func (c *check) faultRows() []faultRow {
	var out []faultRow
	for _, f := range c.run.Applied {
		out = append(out, faultRow{At: fmt.Sprintf("+%.3fs", float64(f.From-c.run.WindowMono[0])/1e9),
			Took: time.Duration(f.To - f.From).Round(time.Millisecond).String(), Kind: f.Kind, Target: f.Target, Detail: f.Detail})
	}
	return out
}

// annotations add the faults, the job runs and the fenced sink's
// rejections to porcupine's timeline of the lease operations.
func (c *check) annotations() []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range c.run.Applied {
		out = append(out, porcupine.Annotation{Tag: "faults", Start: f.From, End: f.To,
			Description: f.Kind + " " + f.Target, Details: f.Detail, BackgroundColor: "#f8d7da"})
	}
	starts := map[string]history.Event{}
	for _, e := range c.events {
		switch {
		case e.Kind == history.Start:
			starts[e.Process+e.Key+fmt.Sprint(e.Token)] = e
		case e.Kind == history.End:
			if s, ok := starts[e.Process+e.Key+fmt.Sprint(e.Token)]; ok {
				out = append(out, porcupine.Annotation{Tag: "runs " + e.Process, Start: s.T, End: e.T,
					Description: fmt.Sprintf("t%d", e.Token), Details: fmt.Sprintf("%s attempt %d token %d", e.Key, e.Attempt, e.Token)})
			}
		case e.Kind == history.Effect && e.Sink == "fenced" && e.Result == history.Rejected:
			out = append(out, porcupine.Annotation{Tag: "sink rejections", Start: e.T,
				Description: fmt.Sprintf("%s t%d", e.Process, e.Token), Details: fmt.Sprintf("%s: token %d < %d", e.Key, e.Token, e.HeldToken),
				BackgroundColor: "#ffc107"})
		case e.Kind == history.Lose:
			out = append(out, porcupine.Annotation{Tag: "lost " + e.Process, Start: e.T,
				Description: fmt.Sprintf("lost t%d", e.Token), Details: e.Detail, BackgroundColor: "#f5c6cb"})
		}
	}
	return out
}

var summaryPage = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>leasehold chaos: {{.R.Run.Backend}}</title>
<style>body{font-family:sans-serif;margin:2em}pre{background:#f6f8fa;padding:1em}
td,th{padding:2px 8px;text-align:left}.fail{color:#b00}.pass{color:#070}</style></head><body>
<h1>leasehold chaos: {{.R.Run.Backend}} <span class="{{if .R.Pass}}pass">PASS{{else}}fail">FAIL{{end}}</span></h1>
<pre>{{.Text}}</pre>
<p><a href="{{.Timeline}}">Timeline</a>: every lease operation (porcupine's linearizability view), with faults, job runs, lost leases and the fenced sink's rejections.
Files: run.json, history.jsonl, fenced.jsonl, unfenced.jsonl, report.json.</p>
<h2>Faults</h2><table><tr><th>at</th><th>for</th><th>fault</th><th>target</th><th>detail</th></tr>
{{range .Faults}}<tr><td>{{.At}}</td><td>{{.Took}}</td><td>{{.Kind}}</td><td>{{.Target}}</td><td>{{.Detail}}</td></tr>{{end}}</table>
{{if .R.Regressions}}<h2>Token regressions</h2><table><tr><th>scope</th><th>earlier</th><th>later</th><th>across a restart</th></tr>
{{range .R.Regressions}}<tr><td>{{.Scope}}</td><td>{{.Earlier}}</td><td>{{.Later}}</td><td>{{.AcrossRestart}}</td></tr>{{end}}</table>{{end}}
{{if .R.FencedDuplicates}}<h2>Duplicates at the fenced sink</h2><table><tr><th>occurrence</th><th>tokens</th><th>explained by a lost lease</th></tr>
{{range .R.FencedDuplicates}}<tr><td>{{.Key}}</td><td>{{.Tokens}}</td><td>{{.Explained}}</td></tr>{{end}}</table>{{end}}
</body></html>
`))
