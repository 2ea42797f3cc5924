package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestValidateNamesEveryField: a job with several bad fields gets one
// FieldError per field, each naming the field's value, all wrapping
// leasehold.ErrInvalid or ErrInvalidSpec.
func TestValidateNamesEveryField(t *testing.T) {
	err := Validate(Job{Name: "mode-report", Schedule: "61 * * * *", Zone: "Mars/Base", Timeout: -1, Revision: -2,
		MaxCatchUp: -1, Func: func(context.Context, Run) error { return nil }}, 0)
	want := map[string]string{"Schedule": `"61 * * * *"`, "Zone": `"Mars/Base"`, "Timeout": "timeout -1ns", "Revision": "revision -2", "MaxCatchUp": "max catch-up -1"}
	got := map[string]string{}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a FieldError", e)
		}
		if !errors.Is(e, leasehold.ErrInvalid) && !errors.Is(e, ErrSpecInvalid) {
			t.Errorf("%v wraps neither ErrInvalid nor ErrInvalidSpec", e)
		}
		got[fe.Field] = e.Error()
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	for f, w := range want {
		if !strings.Contains(got[f], w) {
			t.Errorf("%s: %q, want it to contain %q", f, got[f], w)
		}
	}
}
