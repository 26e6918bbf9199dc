package server

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// smallRequestBytes is the size up to which a request waits for room in the
// in-flight budget until its own deadline instead of being refused: worker
// heartbeats, claims and reports must not fail because large submits fill
// the budget.
const smallRequestBytes = 64 << 10

// admission bounds the bytes of requests that replica handlers hold at once
// (Config.InflightBytes). A request's size is its encoded size; it is held
// from admission until its handler returns.
//
//   - A request that fits in what is left of the budget is admitted at once.
//   - A request of at most smallRequestBytes waits for room until its
//     deadline (then DEADLINE_EXCEEDED, which clients retry like any
//     timeout).
//   - A larger request waits at most Config.AdmitWait, and only while the
//     larger requests already waiting total at most the budget too;
//     otherwise it is refused with RESOURCE_EXHAUSTED ("coordinator busy"),
//     which changes nothing and which clients do not retry blindly (the CLI
//     backs off and tries again within its --timeout).
//
// So the memory of decoded requests held by handlers or waiting is at most
// twice the budget plus the small waiting requests; gRPC's message limit
// (Limits.MaxMessageBytes) bounds each request before it is decoded.
type admission struct {
	budget int64
	wait   time.Duration

	mu      sync.Mutex
	used    int64 // bytes of admitted requests
	waiting int64 // bytes of large requests waiting
	freed   chan struct{}
}

func newAdmission(budget int64, wait time.Duration) *admission {
	return &admission{budget: budget, wait: wait, freed: make(chan struct{})}
}

// busy is the refusal of a request the budget has no room for.
func (a *admission) busy(n int64) error {
	return status.Errorf(codes.ResourceExhausted,
		"coordinator busy: a %d-byte request does not fit in the in-flight request budget of %d bytes; nothing was done, retry later", n, a.budget)
}

// acquire admits a request of n bytes (see admission) or returns the gRPC
// error refusing it.
func (a *admission) acquire(ctx context.Context, n int64) error {
	a.mu.Lock()
	if a.used+n <= a.budget {
		a.used += n
		a.mu.Unlock()
		return nil
	}
	large := n > smallRequestBytes
	if n > a.budget || (large && a.waiting+n > a.budget) {
		a.mu.Unlock()
		return a.busy(n)
	}
	var timeout <-chan time.Time
	if large {
		a.waiting += n
		t := time.NewTimer(a.wait)
		defer t.Stop()
		timeout = t.C
	}
	// Called with a.mu held; gives up waiting.
	stop := func() {
		if large {
			a.waiting -= n
		}
		a.mu.Unlock()
	}
	for {
		freed := a.freed
		a.mu.Unlock()
		select {
		case <-freed:
			a.mu.Lock()
			if a.used+n <= a.budget {
				a.used += n
				stop()
				return nil
			}
		case <-ctx.Done():
			a.mu.Lock()
			stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-timeout:
			a.mu.Lock()
			stop()
			return a.busy(n)
		}
	}
}

// release returns n bytes to the budget and wakes the waiting requests.
func (a *admission) release(n int64) {
	a.mu.Lock()
	a.used -= n
	close(a.freed)
	a.freed = make(chan struct{})
	a.mu.Unlock()
}

// inFlight returns the bytes held by admitted requests.
func (a *admission) inFlight() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}

// admit is the unary server interceptor of admission.
func (s *Server) admit(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var n int64
	if m, ok := req.(proto.Message); ok {
		n = int64(proto.Size(m))
	}
	if err := s.adm.acquire(ctx, n); err != nil {
		return nil, err
	}
	defer s.adm.release(n)
	return handler(ctx, req)
}

// GRPCOptions returns the options a replica's gRPC server must be built
// with: the message size limit (Limits.MaxMessageBytes, received and sent),
// the calls in flight per connection (Config.MaxConcurrentStreams), the
// deadline of a new connection's handshake (Config.ConnectionTimeout),
// keepalive (an idle connection is closed after 15 minutes; the server
// pings a silent client every 2 minutes and drops it when the ping goes
// unanswered for 20 s), the per-caller limits (see callerLimits; they
// expect to run after Authz) and the admission interceptor that bounds the
// bytes of requests in flight (Config.InflightBytes; see admission).
// Further interceptors may be added with grpc.ChainUnaryInterceptor.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.Limits.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.cfg.Limits.MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: 15 * time.Minute,
			Time:              2 * time.Minute,
			Timeout:           20 * time.Second,
		}),
		grpc.ChainUnaryInterceptor(s.limitCaller, s.admit),
	}
	if s.cfg.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(s.cfg.MaxConcurrentStreams))
	}
	if s.cfg.ConnectionTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(s.cfg.ConnectionTimeout))
	}
	return opts
}
