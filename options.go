package leasehold

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/keeper"
)

// Option configures a Locker or an Elector. Options are validated together
// by NewLocker / NewElector, which return an error naming the field and the
// value; the defaults are valid.
type Option func(*config)

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

// WithInstance names this instance (default: the host name). The name is
// what people see as the holder; a random nonce per grant keeps two
// instances with the same name apart.
func WithInstance(name string) Option { return func(c *config) { c.instance = name } }

// WithNamespace sets the key namespace (default "default").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithTTL sets the lease TTL requested from the backend (default 15 s).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithRenewEvery sets how often the watchdog renews a held lease (default
// TTL/3). It is also the retry period of a failed renewal.
func WithRenewEvery(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// WithRenewDeadline bounds one renew attempt (default 2·TTL/3). The timing
// contract TTL > RenewDeadline > RenewEvery is validated up front.
func WithRenewDeadline(d time.Duration) Option { return func(c *config) { c.renewDeadline = d } }

// WithDrift sets the assumed worst clock-rate difference between this host
// and the backend, as a fraction in [0, 0.5) (default 0.01). The holder's
// deadline is shortened by TTL × drift.
func WithDrift(f float64) Option { return func(c *config) { c.drift = f } }

// WithMargin sets a fixed safety margin subtracted from the holder's
// deadline (default min(TTL/20, 500 ms)).
func WithMargin(d time.Duration) Option { return func(c *config) { c.margin = d } }

// WithBackoff sets the bounds of the jittered exponential backoff between
// attempts of a blocking Acquire (default 10 ms to 1 s). A backend that
// pushes release events wakes waiters before the backoff runs out.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

func newConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
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
