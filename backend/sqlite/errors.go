package sqlite

import (
	"errors"

	"github.com/leasehold/leasehold/backend"
)

// Errors returned by Open, in addition to backend.ErrInvalid, named
// Err<Where><What> (gocron v2's style). Test with errors.Is.
var (
	// ErrNetworkFS: the database's directory is on a network filesystem,
	// where SQLite's WAL locking is unsafe.
	ErrNetworkFS = errors.New("leasehold/sqlite: database on a network filesystem")
	// ErrSchemaTooNew (it is backend.ErrSchemaTooNew): the database was written by a newer leasehold whose
	// schema this code does not know.
	ErrSchemaTooNew = backend.ErrSchemaTooNew
)
