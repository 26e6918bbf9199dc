package flood

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// Port is one port of the target: a name ("grpc", "raft", ...) and its
// address.
type Port struct {
	Name string
	Addr string
}

// Config bounds a flood.
type Config struct {
	// Source is the local IP connections come from ("": the system's
	// choice).
	Source string
	// Conns bounds the connections phase 1 tries per port (default 2000).
	Conns int
	// Slowloris bounds the connections of phase 2, over all ports
	// (default 1000).
	Slowloris int
	// Streams is the number of concurrent calls of phase 3 (default
	// 2000), over StreamConns connections (default 2).
	Streams, StreamConns int
	// TLS is the client configuration (with a certificate) of phase 3;
	// nil skips phase 3.
	TLS *tls.Config
	// Dialers is the number of concurrent dials per port (default 32).
	Dialers int
}

func (c Config) withDefaults() Config {
	if c.Conns <= 0 {
		c.Conns = 2000
	}
	if c.Slowloris <= 0 {
		c.Slowloris = 1000
	}
	if c.Streams <= 0 {
		c.Streams = 2000
	}
	if c.StreamConns <= 0 {
		c.StreamConns = 2
	}
	if c.Dialers <= 0 {
		c.Dialers = 32
	}
	return c
}

// Stats is what a flood did and what the server answered.
type Stats struct {
	// Attempted connections of phase 1; Failed those whose dial failed;
	// Refused those the server closed while the flood held them; Held
	// those still open at the end of the phase.
	Attempted, Failed, Refused, Held int64
	// Slow: the slowloris connections tried, failed to dial, closed by the
	// server, still open at the end; SlowBytes the bytes they sent.
	SlowAttempted, SlowFailed, SlowClosed, SlowHeld, SlowBytes int64
	// Calls of phase 3: answered, refused with ResourceExhausted, failed
	// otherwise.
	Calls, CallsOK, CallsExhausted, CallsErr int64
	// FDErrors counts dials that failed because the flooder itself was out
	// of files.
	FDErrors int64
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Attempted: s.Attempted + o.Attempted, Failed: s.Failed + o.Failed, Refused: s.Refused + o.Refused, Held: s.Held + o.Held,
		SlowAttempted: s.SlowAttempted + o.SlowAttempted, SlowFailed: s.SlowFailed + o.SlowFailed, SlowClosed: s.SlowClosed + o.SlowClosed,
		SlowHeld: s.SlowHeld + o.SlowHeld, SlowBytes: s.SlowBytes + o.SlowBytes,
		Calls: s.Calls + o.Calls, CallsOK: s.CallsOK + o.CallsOK, CallsExhausted: s.CallsExhausted + o.CallsExhausted, CallsErr: s.CallsErr + o.CallsErr,
		FDErrors: s.FDErrors + o.FDErrors,
	}
}

// String gives the figures for the history and the report.
func (s Stats) String() string {
	return fmt.Sprintf("hold: %d attempted, %d dial failed, %d closed by server, %d held; slowloris: %d attempted, %d dial failed, %d closed by server, %d held, %d bytes; streams: %d calls, %d ok, %d resource-exhausted, %d other errors",
		s.Attempted, s.Failed, s.Refused, s.Held, s.SlowAttempted, s.SlowFailed, s.SlowClosed, s.SlowHeld, s.SlowBytes,
		s.Calls, s.CallsOK, s.CallsExhausted, s.CallsErr)
}

// Run floods ports (the first named "grpc" also gets phase 3) for hold:
// phase 1 for 40% of it, phase 2 for 30%, phase 3 for the rest. It returns
// when hold has passed or ctx ends, with every connection closed.
func Run(ctx context.Context, cfg Config, ports []Port, hold time.Duration) Stats {
	cfg = cfg.withDefaults()
	if free := freeFiles(); free >= 0 && len(ports) > 0 {
		// Leave the harness itself files for its clients and histories.
		budget := max(free-reserveFiles, 0)
		cfg.Conns = min(cfg.Conns, budget/len(ports))
		cfg.Slowloris = min(cfg.Slowloris, budget)
	}
	var st stats
	end := time.Now().Add(hold)
	p1 := time.Now().Add(hold * 4 / 10)
	p2 := time.Now().Add(hold * 7 / 10)
	phase(ctx, p1, func(pctx context.Context) { holdConns(pctx, cfg, ports, &st) })
	phase(ctx, p2, func(pctx context.Context) { slowloris(pctx, cfg, ports, &st) })
	if cfg.TLS != nil {
		for _, p := range ports {
			if p.Name == "grpc" {
				phase(ctx, end, func(pctx context.Context) { streams(pctx, cfg, p.Addr, &st) })
				break
			}
		}
	}
	phase(ctx, end, func(pctx context.Context) { <-pctx.Done() })
	return st.snapshot()
}

func phase(ctx context.Context, until time.Time, f func(context.Context)) {
	pctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	f(pctx)
}

type stats struct {
	attempted, failed, refused, held                           atomic.Int64
	slowAttempted, slowFailed, slowClosed, slowHeld, slowBytes atomic.Int64
	calls, callsOK, callsExhausted, callsErr, fdErrors         atomic.Int64
}

func (s *stats) snapshot() Stats {
	return Stats{
		Attempted: s.attempted.Load(), Failed: s.failed.Load(), Refused: s.refused.Load(), Held: s.held.Load(),
		SlowAttempted: s.slowAttempted.Load(), SlowFailed: s.slowFailed.Load(), SlowClosed: s.slowClosed.Load(),
		SlowHeld: s.slowHeld.Load(), SlowBytes: s.slowBytes.Load(),
		Calls: s.calls.Load(), CallsOK: s.callsOK.Load(), CallsExhausted: s.callsExhausted.Load(), CallsErr: s.callsErr.Load(),
		FDErrors: s.fdErrors.Load(),
	}
}

func (cfg Config) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: time.Second}
	if cfg.Source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.Source)}
	}
	return d
}

func (s *stats) dialFailed(err error, slow bool) {
	if slow {
		s.slowFailed.Add(1)
	} else {
		s.failed.Add(1)
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		s.fdErrors.Add(1)
	}
}

// holdConns opens up to cfg.Conns connections per port and holds them
// until ctx ends; a read that returns before then means the server closed
// the connection.
func holdConns(ctx context.Context, cfg Config, ports []Port, st *stats) {
	d := cfg.dialer()
	var wg, readers sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	for _, p := range ports {
		var left atomic.Int64
		left.Store(int64(cfg.Conns))
		for range cfg.Dialers {
			wg.Go(func() {
				for ctx.Err() == nil && left.Add(-1) >= 0 {
					st.attempted.Add(1)
					c, err := d.DialContext(ctx, "tcp", p.Addr)
					if err != nil {
						if ctx.Err() == nil {
							st.dialFailed(err, false)
						} else {
							st.attempted.Add(-1)
						}
						continue
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					readers.Go(func() {
						var b [1]byte
						for {
							_, err := c.Read(b[:])
							if err != nil {
								if ctx.Err() == nil {
									st.refused.Add(1)
								}
								return
							}
						}
					})
				}
			})
		}
	}
	wg.Wait()
	<-ctx.Done()
	mu.Lock()
	st.held.Add(int64(len(conns)) - st.refused.Load())
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	readers.Wait()
}

// clientHello is the start of a TLS 1.2/1.3 ClientHello record; the rest
// of the bytes sent are zeros (the server never gets that far).
var clientHello = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}

// slowloris opens up to cfg.Slowloris connections over ports, each sending
// one byte a second, until ctx ends or the server closes it.
func slowloris(ctx context.Context, cfg Config, ports []Port, st *stats) {
	if len(ports) == 0 {
		return
	}
	d := cfg.dialer()
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(cfg.Slowloris))
	var next atomic.Int64
	for range cfg.Dialers {
		wg.Go(func() {
			for ctx.Err() == nil && left.Add(-1) >= 0 {
				p := ports[int(next.Add(1))%len(ports)]
				st.slowAttempted.Add(1)
				c, err := d.DialContext(ctx, "tcp", p.Addr)
				if err != nil {
					if ctx.Err() == nil {
						st.dialFailed(err, true)
					} else {
						st.slowAttempted.Add(-1)
					}
					continue
				}
				wg.Go(func() { drip(ctx, c, st) })
			}
		})
	}
	wg.Wait()
}

// drip sends c one byte of clientHello a second until ctx ends (held) or
// the server closes it.
func drip(ctx context.Context, c net.Conn, st *stats) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	for i := 0; ; i++ {
		var out byte
		if i < len(clientHello) {
			out = clientHello[i]
		}
		if _, err := c.Write([]byte{out}); err != nil {
			if ctx.Err() == nil {
				st.slowClosed.Add(1)
			} else {
				st.slowHeld.Add(1)
			}
			return
		}
		st.slowBytes.Add(1)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(b[:])
		if ctx.Err() != nil {
			st.slowHeld.Add(1)
			return
		}
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			// The server answered (an alert) or closed it.
			st.slowClosed.Add(1)
			return
		}
	}
}

// streams makes cfg.Streams concurrent Cluster calls, each repeated until
// ctx ends, over cfg.StreamConns connections to addr.
func streams(ctx context.Context, cfg Config, addr string, st *stats) {
	d := cfg.dialer()
	var conns []*grpc.ClientConn
	for range cfg.StreamConns {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS.Clone())),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
		if err != nil {
			st.callsErr.Add(1)
			continue
		}
		conns = append(conns, cc)
	}
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	if len(conns) == 0 {
		return
	}
	var wg sync.WaitGroup
	for i := range cfg.Streams {
		cl := rolloutv1.NewCoordinatorClient(conns[i%len(conns)])
		wg.Go(func() {
			for ctx.Err() == nil {
				st.calls.Add(1)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := cl.Cluster(cctx, &rolloutv1.ClusterRequest{})
				cancel()
				switch {
				case err == nil:
					st.callsOK.Add(1)
					pause(ctx, 200*time.Millisecond)
				case status.Code(err) == codes.ResourceExhausted:
					st.callsExhausted.Add(1)
					// Wait a little, as a client told to retry later would.
					pause(ctx, 200*time.Millisecond)
				case ctx.Err() != nil:
					st.calls.Add(-1)
				default:
					// The leader is paused, cut off or gone: wait, as
					// after a refusal, rather than spin on fast errors.
					st.callsErr.Add(1)
					pause(ctx, 200*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

// pause waits d or until ctx ends: the callers stay concurrent without
// spinning the harness's (and the replica's) processors.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// reserveFiles are the open files a flood leaves to the rest of its
// process.
const reserveFiles = 1024

// freeFiles returns how many more files the process may open (-1: unknown).
func freeFiles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return -1
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return int(rl.Cur) - len(ents)
}
