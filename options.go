package leasehold

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/keeper"
	"github.com/leasehold/leasehold/internal/option"
)

// Option configures a Locker, an Elector or a schedule.Scheduler: the one
// option type of NewLocker, NewElector and schedule.New (schedule.Option is
// the same type). Every option validates its argument and the constructor
// returns the first error, wrapping ErrInvalid and naming the option and the
// value; options are then validated together (TTL > RenewDeadline >
// RenewEvery, …). The defaults are valid.
//
// WithInstance, WithNamespace, WithDrift, WithMargin and WithLogger are
// shared: they configure all three constructors. The others configure what
// their doc says; given to another constructor they are refused with
// ErrInvalid (a Scheduler's runs take their TTL from schedule.Job.LeaseTTL,
// not WithTTL).
type Option = option.Option

type config struct {
	instance      string
	namespace     string
	ttl           time.Duration
	renewEvery    time.Duration // client-go's RetryPeriod
	renewDeadline time.Duration // timeout of one renew attempt
	drift         float64
	margin        time.Duration
	backoffMin    time.Duration
	backoffMax    time.Duration
	logger        *slog.Logger
	observer      Observer // nil: none
}

// Defaults. Like client-go's leader election (15 s / 10 s / 2 s), the TTL is
// long enough to ride out a slow backend and short enough to fail over in
// seconds.
const (
	DefaultTTL       = 15 * time.Second
	DefaultDrift     = keeper.DefaultDrift
	DefaultNamespace = "default"
)

func defaultConfig() config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return config{
		instance:   host,
		namespace:  DefaultNamespace,
		ttl:        DefaultTTL,
		drift:      keeper.DefaultDrift,
		backoffMin: 10 * time.Millisecond,
		backoffMax: time.Second,
		logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// WithInstance names this instance (default: the host name), as the holder
// people see; 1–128 bytes. A random nonce per grant keeps two instances with
// the same name apart. Shared: it names a Scheduler's instance too.
func WithInstance(name string) Option {
	return func(c *option.Config) error {
		if name == "" || len(name) > backend.MaxInstanceLen {
			return fmt.Errorf("%w: WithInstance(%q): must be 1–%d bytes", ErrInvalid, name, backend.MaxInstanceLen)
		}
		c.Instance = name
		return nil
	}
}

// WithNamespace sets the key namespace (default "default"), a path as
// ValidatePath accepts. Shared: it is a Scheduler's namespace too.
func WithNamespace(ns string) Option {
	return func(c *option.Config) error {
		if err := ValidatePath("namespace", ns); err != nil {
			return fmt.Errorf("WithNamespace(%q): %w", ns, err)
		}
		c.Namespace = ns
		return nil
	}
}

// WithDrift sets the assumed worst clock-rate difference between this host
// and the backend, as a fraction in [0, 0.5) (default 0.01). The holder's
// deadline is shortened by TTL × drift. Shared: a Scheduler's runs take it,
// their deadline shortened by Job.LeaseTTL × drift.
func WithDrift(f float64) Option {
	return func(c *option.Config) error {
		if !(f >= 0 && f < 0.5) {
			return fmt.Errorf("%w: WithDrift(%v): not in [0, 0.5)", ErrInvalid, f)
		}
		c.Drift = f
		return nil
	}
}

// WithMargin sets a fixed safety margin subtracted from the holder's
// deadline (default, and when 0, min(TTL/20, 500 ms)); it must not be
// negative. Shared: a Scheduler's runs take it (default per job, from
// Job.LeaseTTL), and Register refuses a job whose LeaseTTL leaves no more
// than a heartbeat interval (LeaseTTL/3) after drift and margin.
func WithMargin(d time.Duration) Option {
	return func(c *option.Config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithMargin(%v): negative", ErrInvalid, d)
		}
		c.Margin = d
		return nil
	}
}

// WithLogger sets the logger (default: discard); it must not be nil.
// Shared: a Scheduler logs to it too.
func WithLogger(l *slog.Logger) Option {
	return func(c *option.Config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): the logger is nil", ErrInvalid)
		}
		c.Logger = l
		return nil
	}
}

// own is an option that sets a Locker's or an Elector's own config; other
// constructors refuse it.
func own(name string, set func(*config) error) Option {
	return func(oc *option.Config) error {
		c, ok := oc.Own.(*config)
		if !ok {
			return fmt.Errorf("%w: leasehold.%s configures a Locker or an Elector, not %s", ErrInvalid, name, oc.For)
		}
		return set(c)
	}
}

// WithTTL sets the lease TTL requested from the backend (default 15 s); it
// must be positive. A Locker or an Elector only.
func WithTTL(d time.Duration) Option {
	return own("WithTTL", func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithTTL(%v): not positive", ErrInvalid, d)
		}
		c.ttl = d
		return nil
	})
}

// WithRenewEvery sets how often the watchdog renews a held lease (default,
// and when 0, TTL/3); it must not be negative. It is also the retry period
// of a failed renewal. A Locker or an Elector only.
func WithRenewEvery(d time.Duration) Option {
	return own("WithRenewEvery", func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRenewEvery(%v): negative", ErrInvalid, d)
		}
		c.renewEvery = d
		return nil
	})
}

// WithRenewDeadline bounds one renew attempt (default, and when 0, 2·TTL/3);
// it must not be negative. The timing contract TTL > RenewDeadline >
// RenewEvery is validated up front. A Locker or an Elector only.
func WithRenewDeadline(d time.Duration) Option {
	return own("WithRenewDeadline", func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRenewDeadline(%v): negative", ErrInvalid, d)
		}
		c.renewDeadline = d
		return nil
	})
}

// WithBackoff sets the bounds of the jittered exponential backoff between
// attempts of a blocking Acquire (default 10 ms to 1 s); min must be
// positive and max at least min. A backend that pushes release events wakes
// waiters before the backoff runs out. A Locker or an Elector only.
func WithBackoff(min, max time.Duration) Option {
	return own("WithBackoff", func(c *config) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: WithBackoff(%v, %v): min must be positive and max at least min", ErrInvalid, min, max)
		}
		c.backoffMin, c.backoffMax = min, max
		return nil
	})
}

func newConfig(opts []Option) (config, error) {
	c := defaultConfig()
	oc := option.Config{
		Shared: option.Shared{Instance: c.instance, Namespace: c.namespace, Drift: c.drift, Margin: c.margin, Logger: c.logger},
		For:    "a Locker or an Elector",
		Own:    &c,
	}
	if err := option.Apply(&oc, opts); err != nil {
		return c, err
	}
	c.instance, c.namespace, c.drift, c.margin, c.logger = oc.Instance, oc.Namespace, oc.Drift, oc.Margin, oc.Logger
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.renewDeadline == 0 {
		c.renewDeadline = c.ttl * 2 / 3
	}
	if c.margin == 0 {
		c.margin = keeper.DefaultMargin(c.ttl)
	}
	return c, c.validate()
}

func (c *config) validate() error {
	if err := ValidatePath("namespace", c.namespace); err != nil {
		return err
	}
	if c.instance == "" || len(c.instance) > 128 {
		return fmt.Errorf("%w: instance %q must be 1–128 bytes", ErrInvalid, c.instance)
	}
	switch {
	case c.ttl <= 0:
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalid, c.ttl)
	case c.renewEvery <= 0:
		return fmt.Errorf("%w: renew every %v is not positive", ErrInvalid, c.renewEvery)
	case !(c.ttl > c.renewDeadline):
		return fmt.Errorf("%w: renew deadline %v must be shorter than ttl %v", ErrInvalid, c.renewDeadline, c.ttl)
	case !(c.renewDeadline > c.renewEvery):
		return fmt.Errorf("%w: renew every %v must be shorter than renew deadline %v", ErrInvalid, c.renewEvery, c.renewDeadline)
	case c.timing().Validate() != nil:
		return fmt.Errorf("%w: %w", ErrInvalid, c.timing().Validate())
	case c.backoffMin <= 0 || c.backoffMax < c.backoffMin:
		return fmt.Errorf("%w: backoff %v..%v must be positive and ordered", ErrInvalid, c.backoffMin, c.backoffMax)
	case c.logger == nil:
		return fmt.Errorf("%w: logger is nil", ErrInvalid)
	}
	if safe := c.safeSpan(c.ttl); safe <= c.renewEvery {
		return fmt.Errorf("%w: ttl %v leaves a holder's deadline of %v after drift %v and margin %v, not more than renew every %v",
			ErrInvalid, c.ttl, safe, c.drift, c.margin, c.renewEvery)
	}
	return nil
}

// timing is the holder's drift and margin (internal/keeper).
func (c *config) timing() keeper.Timing { return keeper.Timing{Drift: c.drift, Margin: c.margin} }

// safeSpan is how long after the send time of a successful acquire or renew
// the holder may trust its lease: granted × (1 − drift) − margin.
func (c *config) safeSpan(granted time.Duration) time.Duration { return c.timing().Span(granted) }
