package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// TestOpen: Open takes exactly the URL backend/open knows for memory and
// refuses anything more, naming the URL.
func TestOpen(t *testing.T) {
	for _, raw := range []string{"memory://", "memory:", "MEMORY://", "memory:///"} {
		b, err := memory.Open(context.Background(), raw)
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		b.Close()
	}
	for _, raw := range []string{"memory://somewhere", "memory:///x", "memory://?a=1", "memory://u:s3cret@", "redis://h:1", "%zz"} {
		_, err := memory.Open(context.Background(), raw)
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error shows the password: %v", raw, err)
		}
	}
}

// Open gives the same backend as New, from the URL a program's
// configuration may hold.
func ExampleOpen() {
	ctx := context.Background()
	b, err := memory.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", o, time.Second)
	fmt.Println(g.Token, err)
	_, err = memory.Open(ctx, "memory://elsewhere")
	fmt.Println(err)
	// Output:
	// 1 <nil>
	// leasehold/backend: invalid argument: backend URL "memory://elsewhere": memory:// takes no host, path or parameters
}
