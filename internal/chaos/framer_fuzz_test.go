package chaos

import (
	"errors"
	"reflect"
	"testing"
)

// frameAll frames data in one direction the way the proxy does when the
// bytes arrive in pieces of step+1 bytes (step 255: all at once): after
// each piece it frames every whole message. It returns the frames and the
// error that stopped it, if any.
func frameAll(f Framer, reply bool, data []byte, step int) ([]Frame, error) {
	var out []Frame
	var pending []byte
	for off := 0; off < len(data); {
		end := min(len(data), off+step+1)
		if step == 255 {
			end = len(data)
		}
		pending = append(pending, data[off:end]...)
		off = end
		for len(pending) > 0 {
			var fr Frame
			var err error
			if reply {
				fr, err = f.Reply(pending)
			} else {
				fr, err = f.Request(pending)
			}
			if err != nil {
				return out, err
			}
			if fr.Len < 0 || fr.Len > len(pending) {
				return out, errors.New("frame length out of range")
			}
			if fr.Len == 0 {
				break
			}
			out = append(out, fr)
			pending = pending[fr.Len:]
		}
	}
	return out, nil
}

// fuzzFramer checks a framer on arbitrary bytes: it never panics, never
// frames beyond its input, and frames the same whether the bytes arrive at
// once or in pieces (a framer that errs on a prefix of a valid stream, or
// frames a prefix differently, would break a proxied connection).
func fuzzFramer(f *testing.F, newFramer func() Framer, seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s, false, byte(255))
		f.Add(s, true, byte(255))
		f.Add(s, false, byte(0))
		f.Add(s, true, byte(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, reply bool, step byte) {
		whole, werr := frameAll(newFramer(), reply, data, 255)
		if werr != nil && !errors.Is(werr, ErrFraming) {
			t.Fatalf("whole: %v is not ErrFraming", werr)
		}
		pieces, perr := frameAll(newFramer(), reply, data, int(step))
		if perr != nil && !errors.Is(perr, ErrFraming) {
			t.Fatalf("pieces: %v is not ErrFraming", perr)
		}
		if werr == nil && perr != nil {
			t.Fatalf("framing in pieces of %d failed (%v) where framing at once did not (%d frames)", int(step)+1, perr, len(whole))
		}
		// Both frame the same prefix of messages; the one that stopped at
		// an error has at most as many.
		n := min(len(whole), len(pieces))
		if !reflect.DeepEqual(whole[:n], pieces[:n]) {
			t.Fatalf("frames differ:\n at once %+v\n in pieces %+v", whole[:n], pieces[:n])
		}
		if werr == nil && perr == nil && len(whole) != len(pieces) {
			t.Fatalf("at once %d frames, in pieces %d", len(whole), len(pieces))
		}
	})
}

func FuzzRESPFramer(f *testing.F) {
	fuzzFramer(f, RESP,
		[]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n"),
		[]byte("+OK\r\n$-1\r\n:5\r\n*2\r\n$1\r\na\r\n*1\r\n:1\r\n%1\r\n+k\r\n+v\r\n>2\r\n+m\r\n+x\r\n"),
		[]byte("PING\r\n|1\r\n+a\r\n+b\r\n+OK\r\n"),
	)
}

func FuzzPostgresFramer(f *testing.F) {
	fuzzFramer(f, Postgres,
		[]byte("\x00\x00\x00\x08\x04\xd2\x16\x2f\x00\x00\x00\x13\x00\x03\x00\x00user\x00u\x00\x00Q\x00\x00\x00\x0dselect 1\x00"),
		[]byte("R\x00\x00\x00\x08\x00\x00\x00\x00Z\x00\x00\x00\x05IZ\x00\x00\x00\x05I"),
		[]byte("N"),
	)
}

func FuzzMySQLFramer(f *testing.F) {
	fuzzFramer(f, MySQL,
		[]byte("\x05\x00\x00\x00\x03SELECT\x01\x00\x00\x00\x0e"),
		[]byte("\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"),
	)
}

func FuzzZooKeeperFramer(f *testing.F) {
	fuzzFramer(f, ZooKeeper,
		[]byte("\x00\x00\x00\x04abcd\x00\x00\x00\x08\x00\x00\x00\x01\x00\x00\x00\x0b"),
		[]byte("\x00\x00\x00\x04abcd\x00\x00\x00\x10\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00"),
	)
}

func FuzzHTTP2Framer(f *testing.F) {
	fuzzFramer(f, HTTP2,
		[]byte(http2Preface+"\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x05\x00\x01\x00\x00\x00\x01hello"),
		[]byte("\x00\x00\x00\x04\x01\x00\x00\x00\x00\x00\x00\x02\x01\x05\x00\x00\x00\x03ab"),
	)
}
