package hint

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/worker"
)

// SignalConfig configures the signal hint.
type SignalConfig struct {
	// Signals are the signals caught (default SIGTERM and SIGINT).
	Signals []os.Signal
	// Logger receives the hint's logs; nil discards them.
	Logger hclog.Logger
}

// Validate reports the first problem with c.
func (c SignalConfig) Validate() error {
	for i, s := range c.Signals {
		if s == nil {
			return fmt.Errorf("%w: Signals[%d] is nil", ErrInvalidConfig, i)
		}
	}
	return nil
}

// Signal turns SIGTERM and SIGINT into notices: the first signal starts a
// drain with the worker's own DrainTimeout (the notice has no deadline), the
// second forces the exit (Notice.Force). After the second, the default
// handling is restored, so a third ends the process at once.
//
// Signals are caught from NewSignal on (a signal that arrives before Watch
// is delivered when Watch starts) until Close.
type Signal struct {
	log hclog.Logger
	ch  chan os.Signal

	mu       sync.Mutex
	watching bool
	closed   bool
}

var _ worker.ComputeHint = (*Signal)(nil)

// NewSignal starts catching the configured signals. Call Close when done.
func NewSignal(cfg SignalConfig) (*Signal, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sigs := cfg.Signals
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	}
	s := &Signal{log: cfg.Logger, ch: make(chan os.Signal, 2)}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.log = s.log.Named("hint-signal")
	signal.Notify(s.ch, sigs...)
	return s, nil
}

// Close stops catching signals: their default handling is restored.
func (s *Signal) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		signal.Stop(s.ch)
	}
	return nil
}

// Watch delivers a notice for the first signal and a forcing notice for the
// second; then it restores the default handling and closes the channel. The
// channel is also closed when ctx ends. It may be called once, before Close.
func (s *Signal) Watch(ctx context.Context) (<-chan worker.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.watching:
		return nil, ErrWatching
	}
	s.watching = true
	out := make(chan worker.Notice, 2)
	go s.forward(ctx, out)
	return out, nil
}

func (s *Signal) forward(ctx context.Context, out chan<- worker.Notice) {
	defer close(out)
	for count := 1; count <= 2; count++ {
		var sig os.Signal
		select {
		case <-ctx.Done():
			return
		case sig = <-s.ch:
		}
		n := worker.Notice{Provider: worker.ProviderSignal, Reason: "received " + sigName(sig)}
		if count == 2 {
			n.Force = true
			n.Reason = "received a second signal (" + sigName(sig) + "): exiting now, nacking what can be nacked"
			_ = s.Close()
		}
		s.log.Warn("stop requested", "reason", n.Reason)
		out <- n // buffered for both notices
	}
}

// sigName is "SIGTERM" for syscall.SIGTERM and the signal's own name
// otherwise.
func sigName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}
