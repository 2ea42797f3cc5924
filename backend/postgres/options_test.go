package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/postgres"
)

// A bad option is refused with backend.ErrInvalid, naming the option and
// the value, before New reaches the server.
func TestOptionsValidated(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/test") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, tc := range []struct {
		opt  postgres.Option
		want string
	}{
		{postgres.WithSchema("public; drop"), `WithSchema("public; drop")`},
		{postgres.WithTablePrefix("9x"), `WithTablePrefix("9x")`},
		{nil, "nil postgres option"},
	} {
		_, err := postgres.New(context.Background(), pool, tc.opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
}
