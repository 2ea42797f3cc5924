// Package recordcodec is how the backends that keep a record of the record
// store (backend.Records) as one opaque value — etcd, ZooKeeper — encode
// it: JSON of its value, its owner and its expiry, and where the key does
// not say them, its name and seq.
package recordcodec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Stored is a record as stored.
type Stored struct {
	Name     string `json:"name,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	Value    string `json:"v"`
	Instance string `json:"inst"`
	Nonce    string `json:"nonce"`
	// Expires is Unix ms; nil: never pruned (Unix ms 0 is an instant).
	Expires *int64 `json:"exp,omitempty"`
}

// New returns req's record as stored; with named, its name and seq too.
func New(req backend.CreateRecordRequest, named bool) Stored {
	s := Stored{Value: req.Value, Instance: req.Owner.Instance, Nonce: req.Owner.Nonce.String()}
	if named {
		s.Name, s.Seq = req.Name, req.Seq
	}
	if !req.Expires.IsZero() {
		ms := req.Expires.UnixMilli()
		s.Expires = &ms
	}
	return s
}

// Encode returns s as stored bytes.
func (s Stored) Encode() []byte {
	v, _ := json.Marshal(s) // strings and numbers: cannot fail
	return v
}

// Decode reads a stored record.
func Decode(v []byte) (Stored, error) {
	var s Stored
	if err := json.Unmarshal(v, &s); err != nil {
		return s, fmt.Errorf("malformed record: %w", err)
	}
	return s, nil
}

// Owner is the record's creator.
func (s Stored) Owner() backend.Owner {
	n, _ := backend.ParseNonce(s.Nonce)
	return backend.Owner{Instance: s.Instance, Nonce: n}
}

// Record is the record named name at seq.
func (s Stored) Record(name string, seq int64) backend.Record {
	r := backend.Record{Name: name, Seq: seq, Value: s.Value, Owner: s.Owner()}
	if s.Expires != nil {
		r.Expires = time.UnixMilli(*s.Expires).UTC()
	}
	return r
}
