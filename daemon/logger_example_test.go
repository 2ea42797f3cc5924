package daemon_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/daemon"
)

func ExampleNewLogger() {
	log, err := daemon.NewLogger(os.Stdout, "json", "info")
	if err != nil {
		panic(err)
	}
	// Drop the time for a stable output. daemon.New adds the instance id
	// to every line of the daemon, as here.
	log = slog.New(noTime{log.With("instance", "web-1").Handler()})
	log.Info("run finished", "job", "report", "token", "42")
	// Output:
	// {"level":"INFO","msg":"run finished","instance":"web-1","job":"report","token":"42"}
}

// noTime drops the time from records, for examples with fixed output.
type noTime struct{ slog.Handler }

func (h noTime) Handle(ctx context.Context, r slog.Record) error {
	r.Time = time.Time{}
	return h.Handler.Handle(ctx, r)
}
