package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStreams is how many keep-alive streams a backend opens.
const kaStreams = 8

// kaStream sends one-shot lease keep-alives over one long-lived
// LeaseKeepAlive stream (clientv3's KeepAliveOnce opens a stream per call);
// a backend has kaStreams of them and each lease uses one. etcd
// answers a stream's requests in order, so replies are matched to waiters
// first-in first-out per lease id: a reply always answers a request sent no
// earlier than the waiter's own, which is what the holder's send-time
// deadline needs.
type kaStream struct {
	c *clientv3.Client

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	waiters map[int64][]chan kaReply
}

type kaReply struct {
	ttl int64
	err error
}

func newKAStreams(c *clientv3.Client) []*kaStream {
	var ks []*kaStream
	for range kaStreams {
		ks = append(ks, &kaStream{c: c, waiters: map[int64][]chan kaReply{}})
	}
	return ks
}

// keepAlive renews lease id once and returns its TTL in seconds;
// rpctypes.ErrLeaseNotFound when the lease is gone.
func (k *kaStream) keepAlive(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	ch := make(chan kaReply, 1)
	k.mu.Lock()
	if k.stream == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
		s, err := pb.NewLeaseClient(k.c.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			k.mu.Unlock()
			return 0, err
		}
		k.stream, k.cancel = s, cancel
		go k.recv(s)
	}
	s := k.stream
	k.waiters[int64(id)] = append(k.waiters[int64(id)], ch)
	err := s.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	k.mu.Unlock()
	if err != nil {
		k.fail(s, err)
	}
	select {
	case r := <-ch:
		return r.ttl, r.err
	case <-ctx.Done():
		return 0, ctx.Err() // the reply, if any, goes to the buffered ch
	}
}

func (k *kaStream) recv(s pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := s.Recv()
		if err != nil {
			k.fail(s, err)
			return
		}
		k.mu.Lock()
		q := k.waiters[resp.ID]
		var ch chan kaReply
		if len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(k.waiters, resp.ID)
			} else {
				k.waiters[resp.ID] = q[1:]
			}
		}
		k.mu.Unlock()
		if ch == nil {
			continue
		}
		if resp.TTL <= 0 {
			ch <- kaReply{err: rpctypes.ErrLeaseNotFound}
		} else {
			ch <- kaReply{ttl: resp.TTL}
		}
	}
}

// fail ends stream s: every waiter gets err, and the next keepAlive opens a
// new stream.
func (k *kaStream) fail(s pb.Lease_LeaseKeepAliveClient, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stream != s {
		return
	}
	k.cancel()
	k.stream, k.cancel = nil, nil
	err = rpctypes.Error(err)
	for id, q := range k.waiters {
		for _, ch := range q {
			ch <- kaReply{err: err}
		}
		delete(k.waiters, id)
	}
}

// close ends the stream.
func (k *kaStream) close() {
	k.mu.Lock()
	s := k.stream
	k.mu.Unlock()
	if s != nil {
		k.fail(s, context.Canceled)
	}
}
