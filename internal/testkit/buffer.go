package testkit

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that writers (a logger, a process's output
// copier) and the test reading it may use at once. The zero value is an
// empty buffer ready to use; a Buffer must not be copied after first use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
