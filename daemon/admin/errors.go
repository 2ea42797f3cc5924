package admin

import "errors"

// Errors returned by this package, named Err<Where><What> (gocron v2's
// style). Test with errors.Is.
var (
	// ErrConfigInvalid: the server's options are invalid (the message names
	// the option and the value).
	ErrConfigInvalid = errors.New("leasehold/admin: invalid configuration")
	// ErrListenerInsecure: the listener is not loopback and no bearer token
	// is configured.
	ErrListenerInsecure = errors.New("leasehold/admin: a listener that is not loopback needs bearer tokens")
	// ErrListenerNotProven: the listener did not prove it holds the token.
	ErrListenerNotProven = errors.New("the listener did not prove it holds the token")
)

// Former names, kept so that existing callers and their errors.Is tests go
// on working: each is the same error value as its new name.
var (
	// ErrConfig is ErrConfigInvalid.
	//
	// Deprecated: use ErrConfigInvalid.
	ErrConfig = ErrConfigInvalid
	// ErrInsecure is ErrListenerInsecure.
	//
	// Deprecated: use ErrListenerInsecure.
	ErrInsecure = ErrListenerInsecure
	// ErrNoProof is ErrListenerNotProven.
	//
	// Deprecated: use ErrListenerNotProven.
	ErrNoProof = ErrListenerNotProven
)
