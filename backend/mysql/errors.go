package mysql

import (
	"errors"

	"github.com/leasehold/leasehold/backend"
)

// Errors returned by this package besides backend's, named Err<Where><What>
// (gocron v2's style). Test with errors.Is.
var (
	// ErrSchemaTooNew (it is backend.ErrSchemaTooNew): the tables were created by a newer leasehold.
	ErrSchemaTooNew = backend.ErrSchemaTooNew
	// ErrSessionUnsuitable: a *sql.DB given to New lacks a connection
	// setting the backend needs.
	ErrSessionUnsuitable = errors.New("leasehold/mysql: connection settings unsuitable")
)

// ErrSession is ErrSessionUnsuitable, under its former name.
//
// Deprecated: use ErrSessionUnsuitable.
var ErrSession = ErrSessionUnsuitable
