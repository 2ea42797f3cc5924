package redlock

import (
	"context"
	"sync"
	"sync/atomic"
)

// Wait implements backend.Notifier: the channel closes when a quorum of
// nodes reports the key released (pushed) or expired (each node's timer at
// its remaining TTL), or free, or when ctx ends. A node that cannot be
// reached never counts.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.wait)
}

func (b *Backend) wait(ctx context.Context, key string) (<-chan struct{}, error) {
	out := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	var once sync.Once
	done := func() { once.Do(func() { close(out); cancel() }) }
	context.AfterFunc(wctx, done)
	var fired atomic.Int32
	for _, n := range b.nodes {
		go func() {
			ch, err := n.w.Wait(wctx, key)
			if err != nil {
				return
			}
			<-ch
			if int(fired.Add(1)) == b.quorum {
				done()
			}
		}()
	}
	return out, nil
}
