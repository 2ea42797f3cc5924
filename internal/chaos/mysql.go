package chaos

// MySQL returns the framer for the MySQL/MariaDB protocol: packets of a
// 3-byte little-endian length and a sequence number, each way; a request
// is one client packet. Replies are framed into packets but not keyed: a
// reply's end depends on the command (a result set's rows and EOF) and is
// not tracked. The proxy then takes a request's reply to begin with the
// first server packet after the request went through, which holds for a
// client with one command in flight per connection (database/sql with
// go-sql-driver/mysql); DropReply discards that packet and everything
// after it, and closes the connection at its arrival. After an SSL
// request the bytes no longer frame (ErrFraming): the connection is
// forwarded unframed.
func MySQL() Framer { return mysqlFramer{} }

type mysqlFramer struct{}

func (mysqlFramer) Request(b []byte) (Frame, error) { return mysqlPacket(b) }
func (mysqlFramer) Reply(b []byte) (Frame, error)   { return mysqlPacket(b) }

func mysqlPacket(b []byte) (Frame, error) {
	if len(b) < 4 {
		return Frame{}, nil
	}
	l := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16
	n, err := lengthPrefixed(b, 4, l, "MySQL")
	return Frame{Len: n}, err
}
