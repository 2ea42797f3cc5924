package chaos

import (
	"errors"
	"fmt"
)

// ErrFraming: a connection's bytes are not the protocol its framer splits.
// The proxy then forwards the rest of that connection unframed (no rule
// sees its requests) and counts it in FramingErrors.
var ErrFraming = errors.New("chaos: bytes do not frame as the protocol")

// maxFrame bounds the length a frame header may announce (64 MiB): a
// larger one is taken as bytes that are not the protocol, not as a reason
// to buffer without end.
const maxFrame = 64 << 20

// Frame is one message found at the start of a connection's bytes.
type Frame struct {
	// Len is the message's length in bytes; 0 means the bytes hold no
	// whole message yet.
	Len int
	// Keyed says Key names the exchange the message belongs to: for a
	// request, the reply that will answer it; for a reply message, the
	// request it answers. A protocol that cannot tell (MySQL, an
	// unknown stream) leaves it false, and so does an unsolicited
	// message (a ZooKeeper watch event, a RESP3 push).
	Keyed bool
	Key   int64
	// Last, on a reply message, marks the one that completes a reply
	// (RESP: each reply; PostgreSQL: ReadyForQuery; ZooKeeper: each reply;
	// HTTP/2: the frame that ends its stream). On a request it marks one
	// that ends its exchange with no reply to come (HTTP/2: the client's
	// RST_STREAM, which a cancelled gRPC call sends).
	Last bool
}

// Framer splits one connection's two byte streams into messages. The
// proxy calls Request from the goroutine that reads the client and Reply
// from the one that reads the server; each is given every byte not yet
// framed in its direction, again after each read until it returns a whole
// message. A framer keeps per-connection state (counters, the phase of a
// handshake) and so serves one connection: a proxy asks its Framer
// constructor (WithFramer) for a new one per connection.
type Framer interface {
	// Request frames the first message of the client's bytes b.
	Request(b []byte) (Frame, error)
	// Reply frames the first message of the server's bytes b.
	Reply(b []byte) (Frame, error)
}

// Raw returns the framer for a protocol the proxy does not understand:
// each read is one message, nothing is keyed. Rules then match chunks of
// bytes as they arrive, and a request's reply cannot be told apart from
// others on its connection (DropReply drops every later reply of the
// connection and leaves it open).
func Raw() Framer { return rawFramer{} }

type rawFramer struct{}

func (rawFramer) Request(b []byte) (Frame, error) { return Frame{Len: len(b)}, nil }
func (rawFramer) Reply(b []byte) (Frame, error)   { return Frame{Len: len(b)}, nil }

// beUint32 reads a big-endian 32-bit number.
func beUint32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// lengthPrefixed frames a message whose header of hdr bytes ends with (or
// is followed by) a length n that counts rest more bytes; it returns the
// message's length or 0 when b does not hold it all yet.
func lengthPrefixed(b []byte, hdr int, n int64, proto string) (int, error) {
	if n < 0 || n > maxFrame {
		return 0, fmt.Errorf("%w: %s message announces %d bytes", ErrFraming, proto, n)
	}
	total := int64(hdr) + n
	if int64(len(b)) < total {
		return 0, nil
	}
	return int(total), nil
}
