package schedule

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// TestReadAllRefusalsSplitsByJob: the refusal statements of every job of a
// namespace, read with one List, are split by job — a job whose name
// extends another's ("a", "ab", "a/b") takes none of the other's, an
// instance name may hold "/" — and none of another namespace's is read.
// ReadRefusals of one job reads what ReadAllRefusals has for it.
func TestReadAllRefusalsSplitsByJob(t *testing.T) {
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	state := func(namespace, job, instance, version string) {
		t.Helper()
		o := backend.Owner{Instance: version, Nonce: backend.NewNonce()}
		if _, err := m.Acquire(ctx, refusalKey(namespace, job, instance), o, refusalTTL); err != nil {
			t.Fatal(err)
		}
	}
	state("ns", "a", "web-2", "v-a2")
	state("ns", "a", "eu/web-1", "v-a1")
	state("ns", "ab", "web-3", "v-ab")
	state("ns", "a/b", "web-4", "v-a/b")
	state("ns2", "a", "web-5", "v-other-namespace")
	state("other", "a", "web-6", "v-other")
	want := map[string][]Refusal{
		"a":   {{Instance: "eu/web-1", Version: "v-a1"}, {Instance: "web-2", Version: "v-a2"}},
		"ab":  {{Instance: "web-3", Version: "v-ab"}},
		"a/b": {{Instance: "web-4", Version: "v-a/b"}},
	}
	var lists atomic.Int32
	l := &faultbackend.Backend{Next: m,
		OnList: func(ctx context.Context, next faultbackend.ListFunc, prefix string, limit int) ([]backend.Lease, error) {
			lists.Add(1)
			return next(ctx, prefix, limit)
		}}
	got, err := ReadAllRefusals(ctx, l, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("ReadAllRefusals made %d List calls, want 1", n)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadAllRefusals(ns) = %+v, want %+v", got, want)
	}
	for _, job := range []string{"a", "ab", "a/b", "b"} {
		one, err := ReadRefusals(ctx, l, "ns", job)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one, want[job]) {
			t.Errorf("ReadRefusals(ns, %s) = %+v, want %+v", job, one, want[job])
		}
	}
}
