package schedule

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// zoneProbeEnv makes the test binary, run as a child, print the instants
// that decide TestZonesIgnoreTheHostDatabase and exit.
const zoneProbeEnv = "LEASEHOLD_ZONE_PROBE"

// tzfile returns the compiled rules of zone name from the database the
// package embeds.
func tzfile(t *testing.T, name string) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := zr.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestZonesIgnoreTheHostDatabase points ZONEINFO at a database in which
// Europe/Paris has Tokyo's rules (a host with wrong or old rules) and checks
// that the standard library follows it — the fault took effect — while
// Parse computes the same instants as without it. Go reads ZONEINFO once per
// process, so the check runs in a child process.
func TestZonesIgnoreTheHostDatabase(t *testing.T) {
	if os.Getenv(zoneProbeEnv) != "" {
		zoneProbe()
		return
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "Europe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Europe", "Paris"), tzfile(t, "Asia/Tokyo"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestZonesIgnoreTheHostDatabase$", "-test.count=1")
	cmd.Env = append(os.Environ(), zoneProbeEnv+"=1", "ZONEINFO="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && (k == "host" || k == "parse") {
			got[k] = v
		}
	}
	// 09:00 in Paris on 2 January 2026 is 08:00 UTC; in Tokyo it is 00:00 UTC.
	if got["host"] != "2026-01-02T00:00:00Z" {
		t.Fatalf("the fake database did not take effect: time.LoadLocation says 09:00 Paris is %q (probe output:\n%s)", got["host"], out)
	}
	if got["parse"] != "2026-01-02T08:00:00Z" {
		t.Fatalf("Parse(\"0 9 * * *\", \"Europe/Paris\") follows the host database: next is %q, want 2026-01-02T08:00:00Z", got["parse"])
	}
}

func zoneProbe() {
	after := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if loc, err := time.LoadLocation("Europe/Paris"); err == nil {
		os.Stdout.WriteString("host=" + time.Date(2026, 1, 2, 9, 0, 0, 0, loc).UTC().Format(time.RFC3339) + "\n")
	}
	if s, err := Parse("0 9 * * *", "Europe/Paris"); err == nil {
		os.Stdout.WriteString("parse=" + s.Next(after).Format(time.RFC3339) + "\n")
	} else {
		os.Stdout.WriteString("parse=error " + err.Error() + "\n")
	}
}

// TestTZDataVersionMatchesGOROOT checks the hand-written TZDataVersion
// against the toolchain's update.bash when the embedded archive is the
// toolchain's own.
func TestTZDataVersionMatchesGOROOT(t *testing.T) {
	dir := filepath.Join(runtime.GOROOT(), "lib", "time")
	zipb, err := os.ReadFile(filepath.Join(dir, "zoneinfo.zip"))
	if err != nil {
		t.Skipf("no toolchain zone archive to compare with: %v", err)
	}
	if !bytes.Equal(zipb, zoneinfoZip) {
		t.Skipf("the embedded zoneinfo.zip is not this toolchain's (%s); TZDataVersion %s cannot be checked against it", runtime.Version(), TZDataVersion)
	}
	script, err := os.ReadFile(filepath.Join(dir, "update.bash"))
	if err != nil {
		t.Skipf("no update.bash: %v", err)
	}
	for _, line := range strings.Split(string(script), "\n") {
		if v, ok := strings.CutPrefix(line, "DATA="); ok {
			if v != TZDataVersion {
				t.Fatalf("the embedded archive is %s's, whose update.bash says DATA=%s, but TZDataVersion = %q", runtime.Version(), v, TZDataVersion)
			}
			return
		}
	}
	t.Fatal("update.bash has no DATA= line")
}
