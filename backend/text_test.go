package backend_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasehold/leasehold/backend"
)

func TestCleanText(t *testing.T) {
	long := "HEAD" + strings.Repeat("é", 100) + "TAIL"
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"plain", 10, "plain"},
		{"a\x00b", 10, "a\uFFFDb"},
		{"\xff\xfe\xfd", 10, "\uFFFD"},
		{"ok\xc3", 10, "ok\uFFFD"},
		{"aaaé", 4, "aaa"}, // shorter than a marker: the head alone, never half a rune
		{long, 60, "HEADéééééé\n[… 174 bytes cut …]\néééééééTAIL"}, // 16 + 25 + 18 bytes
	} {
		if got := backend.CleanText(c.in, c.n); got != c.want {
			t.Errorf("CleanText(%.30q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// FuzzCleanText: whatever the bytes, the result is valid UTF-8 without NUL
// within the limit, keeps both ends of the valid text, and is stable.
func FuzzCleanText(f *testing.F) {
	f.Add("a\x00b\xff", 40)
	f.Add(strings.Repeat("a", 4095)+"é", 4096)
	f.Add(strings.Repeat("😀", 50), 33)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1<<16 {
			t.Skip()
		}
		got := backend.CleanText(s, n)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > n {
			t.Fatalf("CleanText(%q, %d) = %q: not valid UTF-8 without NUL within %d bytes", s, n, got, n)
		}
		v := backend.ValidText(s)
		if len(v) <= n && got != v {
			t.Fatalf("CleanText(%q, %d) = %q, want the whole valid text %q", s, n, got, v)
		}
		if len(v) > n {
			head, tail, cut := strings.Cut(got, "\n[… ")
			if cut {
				tail = tail[strings.Index(tail, " bytes cut …]\n")+len(" bytes cut …]\n"):]
			}
			if !strings.HasPrefix(v, head) || !strings.HasSuffix(v, tail) {
				t.Fatalf("CleanText(%q, %d) = %q: not a head and a tail of %q", s, n, got, v)
			}
		}
		if again := backend.CleanText(got, n); again != got {
			t.Fatalf("CleanText is not stable: %q then %q", got, again)
		}
	})
}
