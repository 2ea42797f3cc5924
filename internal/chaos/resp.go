package chaos

import (
	"bytes"
	"fmt"
	"strconv"
)

// RESP returns the framer for Redis's protocol (RESP2 and RESP3): a
// request is one command (an array of bulk strings, or an inline command
// line), a reply is one value. Replies are keyed by order: the n-th reply
// answers the n-th request. Push messages (RESP3 '>') answer none; on a
// connection in RESP2 subscribe mode, where messages arrive as plain
// arrays, the count is wrong and so is DropReply's choice of reply.
func RESP() Framer { return &respFramer{} }

type respFramer struct {
	requests int64 // requests framed (upstream goroutine only)
	replies  int64 // replies framed (downstream goroutine only)
}

func (f *respFramer) Request(b []byte) (Frame, error) {
	if len(b) == 0 {
		return Frame{}, nil
	}
	var n int
	var err error
	if b[0] == '*' {
		n, err = respValue(b, 0)
	} else {
		n, err = respInline(b)
	}
	if err != nil || n == 0 {
		return Frame{}, err
	}
	fr := Frame{Len: n, Keyed: true, Key: f.requests}
	f.requests++
	return fr, nil
}

func (f *respFramer) Reply(b []byte) (Frame, error) {
	n, err := respValue(b, 0)
	if err != nil || n == 0 {
		return Frame{}, err
	}
	if respPush(b) {
		return Frame{Len: n}, nil
	}
	fr := Frame{Len: n, Keyed: true, Key: f.replies, Last: true}
	f.replies++
	return fr, nil
}

// respPush reports whether the value at the start of b is a RESP3 push
// (after any attribute).
func respPush(b []byte) bool {
	for len(b) > 0 && b[0] == '|' {
		n, err := respAttribute(b)
		if err != nil || n == 0 {
			return false
		}
		b = b[n:]
	}
	return len(b) > 0 && b[0] == '>'
}

// respAttribute returns the length of the attribute at the start of b.
func respAttribute(b []byte) (int, error) {
	line, n, err := respLine(b)
	if err != nil || n == 0 {
		return 0, err
	}
	count, err := respCount(line, b[0])
	if err != nil {
		return 0, err
	}
	return respElems(b, n, 2*count, 1)
}

// respInline frames an inline command: a line ending in \n.
func respInline(b []byte) (int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > 64<<10 { // redis's own limit on an inline request
			return 0, fmt.Errorf("%w: RESP inline command longer than 64 KiB", ErrFraming)
		}
		return 0, nil
	}
	return i + 1, nil
}

// respLine returns the header line of the value at b (type byte excluded,
// CRLF excluded) and the length up to and including the CRLF.
func respLine(b []byte) ([]byte, int, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		if len(b) > 64<<10 {
			return nil, 0, fmt.Errorf("%w: RESP line longer than 64 KiB", ErrFraming)
		}
		return nil, 0, nil
	}
	if i == 0 {
		return nil, 0, fmt.Errorf("%w: RESP value without a type byte", ErrFraming)
	}
	return b[1:i], i + 2, nil
}

func respCount(line []byte, typ byte) (int64, error) {
	c, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil || c < -1 || c > maxFrame {
		return 0, fmt.Errorf("%w: RESP %q header %q is not a length", ErrFraming, typ, line)
	}
	return c, nil
}

// respValue returns the length of the RESP value starting at b[0], 0 if
// b does not hold it all yet; depth bounds nesting.
func respValue(b []byte, depth int) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if depth > 64 {
		return 0, fmt.Errorf("%w: RESP values nested deeper than 64", ErrFraming)
	}
	line, n, err := respLine(b)
	if err != nil || n == 0 {
		return 0, err
	}
	switch typ := b[0]; typ {
	case '+', '-', ':', '_', ',', '#', '(':
		return n, nil
	case '$', '!', '=':
		c, err := respCount(line, typ)
		if err != nil {
			return 0, err
		}
		if c < 0 {
			return n, nil
		}
		total := int64(n) + c + 2
		if int64(len(b)) < total {
			return 0, nil
		}
		if b[total-2] != '\r' || b[total-1] != '\n' {
			return 0, fmt.Errorf("%w: RESP bulk string not followed by CRLF", ErrFraming)
		}
		return int(total), nil
	case '*', '~', '>', '%', '|':
		c, err := respCount(line, typ)
		if err != nil {
			return 0, err
		}
		if typ == '%' || typ == '|' {
			c *= 2
		}
		end, err := respElems(b, n, c, depth+1)
		if err != nil || end == 0 || typ != '|' {
			return end, err
		}
		// An attribute is followed by the value it describes.
		m, err := respValue(b[end:], depth+1)
		if err != nil || m == 0 {
			return 0, err
		}
		return end + m, nil
	default:
		return 0, fmt.Errorf("%w: RESP type byte %q", ErrFraming, typ)
	}
}

// respElems returns the end of count values that start at b[off].
func respElems(b []byte, off int, count int64, depth int) (int, error) {
	for range count {
		m, err := respValue(b[off:], depth)
		if err != nil || m == 0 {
			return 0, err
		}
		off += m
	}
	return off, nil
}

// Command matches a RESP request whose command name (the first element)
// is name, in any case: Command("EVALSHA").
func Command(name string) Match {
	return func(r Request) bool {
		args := respArgs(r.Bytes, 1)
		return len(args) == 1 && bytes.EqualFold(args[0], []byte(name))
	}
}

// respArgs returns the first max bulk strings of a RESP array request.
func respArgs(b []byte, max int) [][]byte {
	line, off, err := respLine(b)
	if err != nil || off == 0 || b[0] != '*' {
		return nil
	}
	c, err := respCount(line, '*')
	if err != nil {
		return nil
	}
	var out [][]byte
	for range min(c, int64(max)) {
		l, n, err := respLine(b[off:])
		if err != nil || n == 0 || b[off] != '$' {
			return out
		}
		sz, err := respCount(l, '$')
		if err != nil || sz < 0 || off+n+int(sz) > len(b) {
			return out
		}
		out = append(out, b[off+n:off+n+int(sz)])
		off += n + int(sz) + 2
	}
	return out
}
