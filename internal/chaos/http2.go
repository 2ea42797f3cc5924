package chaos

import (
	"bytes"
	"fmt"
)

// http2Preface opens every HTTP/2 connection, client to server.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types and flags the framer reads.
const (
	h2Data       = 0x0
	h2Headers    = 0x1
	h2RstStream  = 0x3
	h2EndStream  = 0x1
	h2HeaderSize = 9
)

// HTTP2 returns the framer for cleartext HTTP/2 (h2c), which gRPC and so
// etcd speak: the client's preface, then frames of a 9-byte header, each
// way. A request is one frame; frames are keyed by their stream (a gRPC
// call), and a reply is complete at the frame that ends its stream
// (END_STREAM, or RST_STREAM). Frames of stream 0 (SETTINGS, PING,
// WINDOW_UPDATE of the connection) are not keyed. A rule sees a call's
// HEADERS and DATA as separate requests; the request message is in DATA
// (uncompressed unless the client enables compression). Dropping a reply
// closes the connection at the end of its stream: the header compression
// state of the client would not survive a gap.
func HTTP2() Framer { return &h2Framer{} }

type h2Framer struct {
	prefaced bool // the client's preface went by (upstream only)
}

func (f *h2Framer) Request(b []byte) (Frame, error) {
	if !f.prefaced {
		n := min(len(b), len(http2Preface))
		if !bytes.Equal(b[:n], []byte(http2Preface[:n])) {
			return Frame{}, fmt.Errorf("%w: no HTTP/2 client preface", ErrFraming)
		}
		if n < len(http2Preface) {
			return Frame{}, nil
		}
		f.prefaced = true
		return Frame{Len: n}, nil
	}
	return h2Frame(b, false)
}

func (f *h2Framer) Reply(b []byte) (Frame, error) { return h2Frame(b, true) }

// h2Frame frames one frame; Last marks a stream's end: on a reply, the
// frame with END_STREAM or RST_STREAM; on a request, RST_STREAM only (a
// request's END_STREAM ends the request, not the exchange).
func h2Frame(b []byte, reply bool) (Frame, error) {
	if len(b) < h2HeaderSize {
		return Frame{}, nil
	}
	l := int64(b[0])<<16 | int64(b[1])<<8 | int64(b[2])
	n, err := lengthPrefixed(b, h2HeaderSize, l, "HTTP/2")
	if err != nil || n == 0 {
		return Frame{}, err
	}
	typ, flags := b[3], b[4]
	stream := int64(beUint32(b[5:]) & 0x7fffffff)
	fr := Frame{Len: n}
	if stream != 0 {
		fr.Keyed, fr.Key = true, stream
		fr.Last = reply && (typ == h2Data || typ == h2Headers) && flags&h2EndStream != 0 || typ == h2RstStream
	}
	return fr, nil
}
