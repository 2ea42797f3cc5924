// Package nsrecipe reads the confinement recipes that docs/namespaces.md
// prints for each backend, so that tests run the commands exactly as the
// page shows them (with only the placeholders — names and passwords —
// replaced) instead of a copy that could drift from the page.
package nsrecipe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Path returns the path of docs/namespaces.md in the module this package
// was compiled from.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "namespaces.md")
}

// Block returns the lines of the first fenced code block in the section of
// docs/namespaces.md whose "## " heading starts with heading, without the
// fences.
func Block(heading string) ([]string, error) {
	f, err := os.Open(Path())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		inSection, inBlock bool
		lines              []string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inBlock && strings.HasPrefix(line, "```"):
			return lines, nil
		case inBlock:
			lines = append(lines, line)
		case strings.HasPrefix(line, "## "):
			inSection = strings.HasPrefix(strings.TrimPrefix(line, "## "), heading)
		case inSection && strings.HasPrefix(line, "```"):
			inBlock = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inBlock {
		return nil, fmt.Errorf("nsrecipe: %s: code block of section %q not closed", Path(), heading)
	}
	return nil, fmt.Errorf("nsrecipe: %s: no code block in a section %q", Path(), heading)
}

// ShellCommands returns the commands of the section's code block: one per
// line, "#" comments and blank lines removed, each split into words at
// white space, after replacing placeholders by r (nil: none).
func ShellCommands(heading string, r *strings.Replacer) ([][]string, error) {
	lines, err := Block(heading)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, l := range lines {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if r != nil {
			l = r.Replace(l)
		}
		if w := strings.Fields(l); len(w) > 0 {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("nsrecipe: section " + heading + ": no commands")
	}
	return out, nil
}

// SQLStatements returns the SQL statements of the section's code block:
// "--" comments removed, lines joined, split at ";", after replacing
// placeholders by r (nil: none).
func SQLStatements(heading string, r *strings.Replacer) ([]string, error) {
	lines, err := Block(heading)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, l := range lines {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	text := b.String()
	if r != nil {
		text = r.Replace(text)
	}
	var out []string
	for _, s := range strings.Split(text, ";") {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("nsrecipe: section " + heading + ": no statements")
	}
	return out, nil
}
