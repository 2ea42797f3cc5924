// Command configdoc writes the daemon's config reference and JSON Schema
// from the code (package daemon): docs/config.md and
// docs/config.schema.json. Run from the module root:
//
//	go run ./internal/configdoc
//
// A test of package daemon fails when the committed files differ from what
// this writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/daemon"
)

func main() {
	dir := flag.String("dir", "docs", "directory to write config.md and config.schema.json into")
	flag.Parse()
	for name, data := range map[string][]byte{
		"config.md":          []byte(daemon.ConfigReference()),
		"config.schema.json": daemon.ConfigSchema(),
	} {
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "configdoc:", err)
			os.Exit(1)
		}
	}
}
