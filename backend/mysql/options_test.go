package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/mysql"
)

// A bad option is refused with backend.ErrInvalid, naming the option and
// the value, before New reaches the server.
func TestOptionsValidated(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/test") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, tc := range []struct {
		opt  mysql.Option
		want string
	}{
		{mysql.WithTablePrefix("Bad"), `WithTablePrefix("Bad")`},
		{mysql.WithTablePrefix(""), `WithTablePrefix("")`},
		{nil, "nil mysql option"},
	} {
		_, err := mysql.New(context.Background(), db, tc.opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
}
