// Package option is the one option shape of leasehold's constructors:
// leasehold.NewLocker, leasehold.NewElector and schedule.New all take
// leasehold.Option, an alias of Option. The settings they share (instance,
// namespace, drift, margin, logger) live in Shared and are set by options
// defined once, in the root package; an option of one constructor's own
// (a Locker's TTL, a Scheduler's grace) reaches that constructor's config
// through Config.Own and is refused, with an error naming it, by the
// other.
package option

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Shared holds the settings every constructor takes.
type Shared struct {
	Instance  string
	Namespace string
	Drift     float64
	Margin    time.Duration // 0: the default, derived from the lease TTL
	Logger    *slog.Logger
}

// Config is what an Option sets: the shared settings and the constructing
// package's own config.
type Config struct {
	Shared
	// For names what is being built ("a Locker", "a Scheduler"), for error
	// messages.
	For string
	// Own is the constructing package's config (a pointer), which an option
	// of that package's own type-asserts.
	Own any
}

// Option is one setting. It validates its argument and returns an error
// naming the option and the value.
type Option func(*Config) error

// Apply applies opts in order and returns the first error; a nil option is
// refused with backend.ErrInvalid.
func Apply(c *Config, opts []Option) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: option %d is nil", backend.ErrInvalid, i)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}
