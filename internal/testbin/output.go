package testbin

import (
	"bytes"
	"sync"
)

// Output collects what a running child process (or command) writes while
// a test reads it: Write and String may be called from any goroutine. Its
// zero value is ready to use.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
