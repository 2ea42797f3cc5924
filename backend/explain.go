package backend

import (
	"context"
	"time"
)

// Reason says why a backend declares one capability as it does, in terms
// of the server's configuration where that decides it ("appendonly no: a
// restart forgets the token counters").
type Reason struct {
	// Capability is the field of Capabilities it explains ("SafeFencing").
	Capability string
	// Why is one sentence for an operator.
	Why string
}

// Explainer is implemented by backends whose capabilities depend on the
// server's configuration. Explain reads the configuration again and says,
// for each capability it decides, why it holds or not. Capabilities it
// does not mention are fixed by the backend's design (its package doc).
type Explainer interface {
	Explain(ctx context.Context) ([]Reason, error)
}

// CapabilityRefresher is implemented by backends whose Capabilities rest on
// the server's live configuration, which can change while the backend is
// open (Redis's CONFIG SET appendonly no, PostgreSQL's synchronous_commit,
// MySQL's innodb_flush_log_at_trx_commit). RefreshCapabilities reads it
// again and returns the new declaration, with ReadAt set; Capabilities
// returns it from then on. When the configuration cannot be read, nothing
// it would decide is claimed: the declaration falls to false for those
// capabilities, and the error says why (or, for a read the server refused,
// such as a CONFIG GET an ACL forbids, the backend's Explain does; that is
// a declared unknown, not an error). Whoever states a guarantee to people
// (doctor, the daemon) refreshes first.
type CapabilityRefresher interface {
	RefreshCapabilities(ctx context.Context) (Capabilities, error)
}

// ServerClock is implemented by backends that can read the clock their
// expiry is judged by. ServerTime returns that clock's reading, taken
// while the call was in flight (compare it with the local send and
// receive instants to bound the offset).
type ServerClock interface {
	ServerTime(ctx context.Context) (time.Time, error)
}
