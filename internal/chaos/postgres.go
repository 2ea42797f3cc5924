package chaos

import (
	"fmt"
	"sync"
)

// PostgreSQL's untyped first messages, told apart by the code in their
// second int32.
const (
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
	pgCancelRequest = 80877102
	pgProtocol3     = 196608
)

// Postgres returns the framer for PostgreSQL's protocol: the startup
// message (no type byte; also SSLRequest, GSSENCRequest and
// CancelRequest), then messages of a type byte and an int32 length, each
// way. Requests are single messages (Parse, Bind, Execute, Sync...);
// replies are keyed by cycle: every message up to and including the
// ReadyForQuery ('Z') that ends a cycle answers the requests sent since
// the previous Sync or Query, and the single byte that answers an
// SSLRequest is a cycle of its own. After the server accepts TLS ('S')
// the bytes no longer frame (ErrFraming): the connection is forwarded
// unframed.
func Postgres() Framer { return &pgFramer{} }

type pgFramer struct {
	started bool  // the startup message went by (upstream only)
	cycles  int64 // cycles the client's requests opened (upstream only)
	ended   int64 // cycles the server ended (downstream only)

	mu         sync.Mutex
	sslPending int  // SSL/GSSENC requests whose one-byte answer is due
	encrypted  bool // the server accepted TLS or GSS encryption
}

// plain returns ErrFraming once the connection is encrypted.
func (f *pgFramer) plain() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.encrypted {
		return fmt.Errorf("%w: PostgreSQL connection is encrypted", ErrFraming)
	}
	return nil
}

func (f *pgFramer) Request(b []byte) (Frame, error) {
	if err := f.plain(); err != nil {
		return Frame{}, err
	}
	if !f.started {
		if len(b) < 8 {
			return Frame{}, nil
		}
		n, err := lengthPrefixed(b, 0, int64(beUint32(b)), "PostgreSQL startup")
		if err != nil || n == 0 {
			return Frame{}, err
		}
		if n < 8 {
			return Frame{}, fmt.Errorf("%w: PostgreSQL startup message of %d bytes", ErrFraming, n)
		}
		switch code := beUint32(b[4:]); code {
		case pgSSLRequest, pgGSSENCRequest:
			f.mu.Lock()
			f.sslPending++
			f.mu.Unlock()
			return f.opens(n), nil
		case pgCancelRequest:
			return Frame{Len: n}, nil
		case pgProtocol3:
			f.started = true
			return f.opens(n), nil
		default:
			return Frame{}, fmt.Errorf("%w: PostgreSQL startup code %d", ErrFraming, code)
		}
	}
	if len(b) < 5 {
		return Frame{}, nil
	}
	n, err := pgTyped(b)
	if err != nil || n == 0 {
		return Frame{}, err
	}
	switch b[0] {
	case 'S', 'Q', 'F': // Sync, Query, FunctionCall: ReadyForQuery follows
		return f.opens(n), nil
	case 'p': // an answer in the authentication exchange the startup opened
		return Frame{Len: n, Keyed: true, Key: f.cycles - 1}, nil
	case 'X': // Terminate: no answer
		return Frame{Len: n}, nil
	default: // answered in the cycle the next Sync ends
		return Frame{Len: n, Keyed: true, Key: f.cycles}, nil
	}
}

// opens frames a request of n bytes that ends the current cycle.
func (f *pgFramer) opens(n int) Frame {
	fr := Frame{Len: n, Keyed: true, Key: f.cycles}
	f.cycles++
	return fr
}

func (f *pgFramer) Reply(b []byte) (Frame, error) {
	if err := f.plain(); err != nil || len(b) == 0 {
		return Frame{}, err
	}
	f.mu.Lock()
	ssl := f.sslPending > 0
	if ssl {
		f.sslPending--
	}
	f.mu.Unlock()
	if ssl {
		fr := Frame{Len: 1, Keyed: true, Key: f.ended, Last: true}
		f.ended++
		if b[0] != 'N' { // 'S' or 'G': encryption follows, no longer framed
			f.mu.Lock()
			f.encrypted = true
			f.mu.Unlock()
		}
		return fr, nil
	}
	if len(b) < 5 {
		return Frame{}, nil
	}
	n, err := pgTyped(b)
	if err != nil || n == 0 {
		return Frame{}, err
	}
	if b[0] == 'A' { // NotificationResponse: answers no request
		return Frame{Len: n}, nil
	}
	fr := Frame{Len: n, Keyed: true, Key: f.ended, Last: b[0] == 'Z'}
	if fr.Last {
		f.ended++
	}
	return fr, nil
}

// pgTyped frames a message of a type byte and an int32 length that
// counts itself.
func pgTyped(b []byte) (int, error) {
	l := int64(beUint32(b[1:]))
	if l < 4 {
		return 0, fmt.Errorf("%w: PostgreSQL message %q of length %d", ErrFraming, b[0], l)
	}
	return lengthPrefixed(b, 1, l, "PostgreSQL")
}
