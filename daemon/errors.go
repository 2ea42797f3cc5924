package daemon

import "errors"

// Errors returned by this package, named Err<Where><What> (gocron v2's
// style). Test with errors.Is.
var (
	// ErrConfigInvalid: the configuration file is invalid. The message names
	// the file, the line, the field and the value.
	ErrConfigInvalid = errors.New("leasehold/daemon: invalid config")
	// ErrConfigNotReloaded: Reload refused a config; the running config goes
	// on.
	ErrConfigNotReloaded = errors.New("leasehold/daemon: config not reloaded")
	// ErrInstanceAlreadyRunning: another daemon with the same instance id
	// holds the backend. Run does not return it: it logs it and waits (see
	// Run).
	ErrInstanceAlreadyRunning = errors.New("leasehold/daemon: instance id already running")
)

// Former names, kept so that existing callers and their errors.Is tests go
// on working: each is the same error value as its new name.
var (
	// ErrConfig is ErrConfigInvalid.
	//
	// Deprecated: use ErrConfigInvalid.
	ErrConfig = ErrConfigInvalid
	// ErrNotReloaded is ErrConfigNotReloaded.
	//
	// Deprecated: use ErrConfigNotReloaded.
	ErrNotReloaded = ErrConfigNotReloaded
	// ErrDuplicateInstance is ErrInstanceAlreadyRunning.
	//
	// Deprecated: use ErrInstanceAlreadyRunning.
	ErrDuplicateInstance = ErrInstanceAlreadyRunning
)
