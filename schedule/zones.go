package schedule

import (
	"archive/zip"
	"bytes"
	_ "embed" // the zone database below
	"fmt"
	"io"
	"strings"
	"time"
)

// TZDataVersion is the release of the IANA time zone database that the
// package embeds (zoneinfo.zip) and from which every zone is loaded. It is
// an input of every zoned schedule's version, so instances built with
// different rules do not claim under one version.
//
// It is written by hand because the archive does not record its release:
// zoneinfo.zip is a copy of $(go env GOROOT)/lib/time/zoneinfo.zip, and the
// release is the DATA= line of $(go env GOROOT)/lib/time/update.bash of the
// same Go release. Update both together (TestTZDataVersionMatchesGOROOT
// checks them against the toolchain when its archive is the same).
const TZDataVersion = "2025c"

// zoneinfoZip is the IANA database compiled by Go's lib/time/update.bash:
// an uncompressed zip archive of TZif files named by zone.
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

// loadZone loads the IANA zone name from the embedded database only. Unlike
// time.LoadLocation it never reads ZONEINFO or the host's
// /usr/share/zoneinfo, whose rules differ between hosts (an old package, a
// hand-edited file) and would make instances compute different instants
// for one spec.
func loadZone(name string) (*time.Location, error) {
	if name == "UTC" {
		return time.UTC, nil
	}
	if name == "" || name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") || strings.Contains(name, `\`) {
		return nil, fmt.Errorf("time zone %q is not an IANA zone name", name)
	}
	zr, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, fmt.Errorf("embedded time zone database: %w", err)
	}
	f, err := zr.Open(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not an IANA zone name (tzdata %s)", name, TZDataVersion)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.IsDir() {
		return nil, fmt.Errorf("time zone %q is not an IANA zone name (tzdata %s)", name, TZDataVersion)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: embedded database: %w", name, err)
	}
	loc, err := time.LoadLocationFromTZData(name, data)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: embedded database: %w", name, err)
	}
	return loc, nil
}
