package chaos

import (
	"fmt"
	"math"
)

// zkConnectKey keys the session handshake (ConnectRequest and its
// response), which carries no xid.
const zkConnectKey = math.MaxInt64

// ZooKeeper returns the framer for ZooKeeper's client protocol: frames of
// a 4-byte big-endian length, each way. The first frame each way is the
// session handshake; after it, requests start with their xid and replies
// with the xid of the request they answer (pings -2, auth -4), by which
// they are keyed. Watch events (xid -1) answer no request.
func ZooKeeper() Framer { return &zkFramer{} }

type zkFramer struct {
	requested bool // the ConnectRequest went by (upstream only)
	answered  bool // the ConnectResponse went by (downstream only)
}

func (f *zkFramer) Request(b []byte) (Frame, error) {
	fr, xid, err := zkFrame(b, f.requested)
	if err != nil || fr.Len == 0 {
		return Frame{}, err
	}
	if !f.requested {
		f.requested = true
		fr.Keyed, fr.Key = true, zkConnectKey
		return fr, nil
	}
	fr.Keyed, fr.Key = true, int64(xid)
	return fr, nil
}

func (f *zkFramer) Reply(b []byte) (Frame, error) {
	fr, xid, err := zkFrame(b, f.answered)
	if err != nil || fr.Len == 0 {
		return Frame{}, err
	}
	fr.Last = true
	if !f.answered {
		f.answered = true
		fr.Keyed, fr.Key = true, zkConnectKey
		return fr, nil
	}
	if xid == -1 { // a watch event
		return Frame{Len: fr.Len}, nil
	}
	fr.Keyed, fr.Key = true, int64(xid)
	return fr, nil
}

// zkFrame frames one length-prefixed frame and reads its xid when
// withXid.
func zkFrame(b []byte, withXid bool) (Frame, int32, error) {
	if len(b) < 4 {
		return Frame{}, 0, nil
	}
	n, err := lengthPrefixed(b, 4, int64(int32(beUint32(b))), "ZooKeeper")
	if err != nil || n == 0 {
		return Frame{}, 0, err
	}
	if !withXid {
		return Frame{Len: n}, 0, nil
	}
	if n < 8 {
		return Frame{}, 0, fmt.Errorf("%w: ZooKeeper frame of %d bytes has no xid", ErrFraming, n-4)
	}
	return Frame{Len: n}, int32(beUint32(b[4:])), nil
}
