package closegate

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend"
)

func TestGate(t *testing.T) {
	var g Gate
	if err := g.Check(); err != nil {
		t.Fatalf("Check of an open gate: %v", err)
	}
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter of an open gate: %v", err)
	}
	shut := make(chan bool)
	go func() { shut <- g.Shut() }()
	select {
	case <-shut:
		t.Fatal("Shut returned while a call was admitted")
	default:
	}
	g.Leave()
	if !<-shut {
		t.Fatal("the first Shut reported the gate shut before")
	}
	if g.Shut() {
		t.Fatal("a second Shut reported that it shut the gate")
	}
	if err := g.Enter(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Enter of a shut gate: %v, want ErrClosed", err)
	}
	if err := g.Check(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Check of a shut gate: %v, want ErrClosed", err)
	}
}
