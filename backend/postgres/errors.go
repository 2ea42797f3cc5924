package postgres

import (
	"fmt"

	"github.com/leasehold/leasehold/backend"
)

// Errors returned by this package besides backend's, named Err<Where><What>
// (gocron v2's style). Test with errors.Is.
var (
	// ErrLeaseFenced: Fence or FenceRun found that the token no longer holds
	// the lease or the occurrence; the caller must roll its transaction
	// back. It wraps backend.ErrLeaseLost.
	ErrLeaseFenced = fmt.Errorf("postgres: fenced out: %w", backend.ErrLeaseLost)
	// ErrSchemaTooNew (it is backend.ErrSchemaTooNew): the tables were created by a newer leasehold whose
	// schema this code does not know.
	ErrSchemaTooNew = backend.ErrSchemaTooNew
)

// ErrFenced is ErrLeaseFenced, under its former name.
//
// Deprecated: use ErrLeaseFenced.
var ErrFenced = ErrLeaseFenced
