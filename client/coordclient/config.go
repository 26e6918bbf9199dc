package coordclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc/backoff"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/rollout/rollout/api/validate"
)

// Config configures a Client.
type Config struct {
	// Addrs are the coordinator replicas' gRPC addresses (host:port). At
	// least one is required; the first is the initial leader guess.
	Addrs []string
	// TLS, when not nil, is the client TLS configuration (for mutual TLS it
	// holds the client certificate and the CA as RootCAs). Nil selects
	// plaintext transport credentials.
	TLS *tls.Config
	// CallTimeout bounds one attempt of a call. Claim adds the requested wait
	// on top. Zero selects the default (10s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the jittered exponential backoff between
	// attempts. Zero selects the defaults (50ms and 100ms: an election takes
	// a few hundred milliseconds, and a longer backoff would keep a client
	// idle well after the new leader serves; a failed attempt against a
	// replica without a leader is cheap, about ten a second per client).
	RetryMin time.Duration
	RetryMax time.Duration
	// Logger receives retry and leader-change messages. Nil discards them.
	Logger hclog.Logger
	// MaxMessageBytes bounds every message sent and received. Zero selects
	// the coordinator's default (validate.DefaultMaxMessageBytes, 8 MiB).
	MaxMessageBytes int
	// OnRetry, when not nil, is called after every failed attempt that the
	// client is about to back off from and retry: the replica was
	// unreachable, knew no leader, timed out, or answered from a stale term
	// (not a leader hint it follows at once, not a rate-limit wait, not an
	// attempt cut short by the caller's context). A non-nil return ends the
	// call at once with that error wrapped (the caller declares the failure
	// permanent, e.g. a TLS certificate mismatch that retrying cannot fix);
	// nil lets the call retry. It runs on the calling goroutine, possibly for
	// several calls at once, and must not block.
	OnRetry func(RetryEvent) error
	// Dial, when not nil, opens the connection to a replica address in
	// place of TCP (tests serve the fake coordinator in memory, see
	// coordtest.StartInMemory). Nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// RetryEvent is a failed attempt the client is about to retry (see
// Config.OnRetry).
type RetryEvent struct {
	// Method is the call's short name ("SubmitItems", "Cluster", ...).
	Method string
	// Addr is the replica the attempt went to.
	Addr string
	// Err is the attempt's error.
	Err error
	// Failures counts the call's failed attempts so far, this one included
	// (1 at the first). The client rotates through Addrs as attempts fail,
	// so Failures >= len(Addrs) means every address has been tried without
	// an answer: the call is now waiting for the cluster.
	Failures int
}

// reconnectBackoff paces the redials of a connection whose replica is down:
// gRPC's default shape with a base of 100 ms and a cap of 1 s.
func reconnectBackoff() backoff.Config {
	return backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}
}

// Default timing values.
const (
	DefaultCallTimeout = 10 * time.Second
	DefaultRetryMin    = 50 * time.Millisecond
	DefaultRetryMax    = 100 * time.Millisecond
)

// DefaultConfig returns a Config with default timing and no addresses.
func DefaultConfig() Config {
	return Config{
		CallTimeout: DefaultCallTimeout,
		RetryMin:    DefaultRetryMin,
		RetryMax:    DefaultRetryMax,
	}
}

// Validate reports the first problem with c, naming the field. Zero
// durations are valid (they select the defaults); negative ones are not.
func (c Config) Validate() error {
	if len(c.Addrs) == 0 {
		return ErrNoAddrs
	}
	seen := make(map[string]bool, len(c.Addrs))
	for i, a := range c.Addrs {
		if err := validAddr(a); err != nil {
			return fmt.Errorf("%w: Addrs[%d] %q: %v", ErrInvalidConfig, i, a, err)
		}
		if seen[a] {
			return fmt.Errorf("%w: Addrs[%d] %q is listed twice", ErrInvalidConfig, i, a)
		}
		seen[a] = true
	}
	switch {
	case c.CallTimeout < 0:
		return fmt.Errorf("%w: CallTimeout must be >= 0, got %v", ErrInvalidConfig, c.CallTimeout)
	case c.RetryMin < 0:
		return fmt.Errorf("%w: RetryMin must be >= 0, got %v", ErrInvalidConfig, c.RetryMin)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: MaxMessageBytes must be >= 0, got %d", ErrInvalidConfig, c.MaxMessageBytes)
	case c.RetryMax < 0:
		return fmt.Errorf("%w: RetryMax must be >= 0, got %v", ErrInvalidConfig, c.RetryMax)
	}
	if lo, hi := c.withDefaults().RetryMin, c.withDefaults().RetryMax; hi < lo {
		return fmt.Errorf("%w: RetryMax (%v) must be >= RetryMin (%v)", ErrInvalidConfig, hi, lo)
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = validate.DefaultMaxMessageBytes
	}
	return c
}

// dialOptions are the options of every connection besides its transport
// credentials: the message size limit in both directions.
//
// A connection that failed waits at most reconnectBackoff's MaxDelay (1 s) before it
// dials again (gRPC's default grows to two minutes): a replica that was down
// and restarted is often the next leader, and the client must reach it
// within the failover time, not at its next backoff expiry.
func (c Config) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(c.MaxMessageBytes), grpc.MaxCallSendMsgSize(c.MaxMessageBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff(), MinConnectTimeout: 20 * time.Second})}
	if c.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(c.Dial))
	}
	return opts
}

// validAddr checks that a is host:port with a non-empty host and a numeric
// port in range.
func validAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("empty host")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}
