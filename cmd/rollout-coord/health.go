package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/raftnode"
)

// DefaultReadyMaxLag is --ready-max-lag's default: a replica whose state
// machine trails the commit index by more entries than this is not ready
// (it is catching up, from a restart or a snapshot). A busy leader commits
// a few thousand entries a second at most (each a batch of commands), so
// a healthy follower trails by far fewer.
const DefaultReadyMaxLag = 1000

// healthOptions are the flags of the health endpoints.
type healthOptions struct {
	addr   string
	maxLag uint64 // 0: DefaultReadyMaxLag (the flag refuses 0)
}

// lag is the --ready-max-lag in effect.
func (h healthOptions) lag() uint64 {
	if h.maxLag == 0 {
		return DefaultReadyMaxLag
	}
	return h.maxLag
}

// readyMaxLag is --ready-max-lag: a positive integer, refused at parse
// time otherwise.
type readyMaxLag struct{ v *uint64 }

func (l readyMaxLag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return fmt.Errorf("%q: must be a positive integer (0 would flap on every write)", s)
	}
	*l.v = n
	return nil
}

func (l readyMaxLag) String() string {
	if l.v == nil {
		return ""
	}
	return strconv.FormatUint(healthOptions{maxLag: *l.v}.lag(), 10)
}

func (l readyMaxLag) Type() string { return "uint" }

func (h *healthOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&h.addr, "health-addr", "", "host:port for plaintext HTTP GET /livez and /readyz (off when empty; no TLS and no client certificate: bind it pod-local or to loopback). "+
		"Live: the process serves and its Raft node has not stopped. Ready: a member of the configuration that knows the current leader (itself or another) and has applied within --ready-max-lag entries of the commit index")
	h.maxLag = DefaultReadyMaxLag
	f.Var(readyMaxLag{&h.maxLag}, "ready-max-lag", "most committed entries a ready replica may have left to apply (see --health-addr)")
}

// validate checks the health flags; bad ones name the flag.
func (h *healthOptions) validate() error {
	if h.addr == "" {
		return nil
	}
	if err := checkHostPort(h.addr); err != nil {
		return fmt.Errorf("--health-addr: %w", err)
	}
	return nil
}

// checkHostPort checks host:port with a numeric port in 0..65535 (the host
// may be empty: every interface).
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return fmt.Errorf("%q has an invalid port %q", addr, port)
	}
	return nil
}

// readinessSource is what the health handler needs of a replica;
// *raftnode.Node has it.
type readinessSource interface {
	Readiness() raftnode.Readiness
}

// healthHandler serves GET /livez and GET /readyz: 200 or 503 with a
// one-line reason (text/plain). Other paths are 404, other methods 405.
// HEAD answers like GET without a body.
type healthHandler struct {
	node   readinessSource
	maxLag uint64
}

// live says whether the replica is alive: its Raft node has not stopped.
// It never depends on a leader: a replica waiting for a quorum is alive.
func live(r raftnode.Readiness) (bool, string) {
	if r.Stopped {
		return false, fmt.Sprintf("not live: raft %s", r.StopReason)
	}
	return true, fmt.Sprintf("live: %s, raft %s, term %d", r.ID, strings.ToLower(r.State), r.Term)
}

// ready says whether the replica is ready: live, a member of the
// configuration, knowing the current leader, and within maxLag entries of
// the commit index. Being the leader is not required.
func ready(r raftnode.Readiness, maxLag uint64) (bool, string) {
	if ok, why := live(r); !ok {
		return false, "not ready: " + strings.TrimPrefix(why, "not live: ")
	}
	switch {
	case !r.Member && r.Members == 0:
		return false, fmt.Sprintf("not ready: %s is no member of a cluster yet (joining, or waiting to be bootstrapped)", r.ID)
	case !r.Member:
		return false, fmt.Sprintf("not ready: %s is not in the configuration of %d servers (joining, or removed)", r.ID, r.Members)
	case r.LeaderID == "":
		return false, fmt.Sprintf("not ready: no known leader (%s is %s in term %d: an election, or no quorum)", r.ID, strings.ToLower(r.State), r.Term)
	case r.Lag() > maxLag:
		return false, fmt.Sprintf("not ready: %s applied %d of commit %d, %d behind (--ready-max-lag %d)", r.ID, r.AppliedIndex, r.CommitIndex, r.Lag(), maxLag)
	}
	return true, fmt.Sprintf("ready: %s %s, leader %s, applied %d of commit %d", strings.ToLower(r.Suffrage), r.ID, r.LeaderID, r.AppliedIndex, r.CommitIndex)
}

func (h healthHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var check func(raftnode.Readiness) (bool, string)
	switch req.URL.Path {
	case "/livez":
		check = live
	case "/readyz":
		check = func(r raftnode.Readiness) (bool, string) { return ready(r, h.maxLag) }
	default:
		http.Error(w, "not found: the health endpoints are GET /livez and GET /readyz", http.StatusNotFound)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: "+req.Method+" (use GET)", http.StatusMethodNotAllowed)
		return
	}
	ok, why := check(h.node.Readiness())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if req.Method == http.MethodGet {
		fmt.Fprintln(w, why)
	}
}

// healthLimits are the health listener's connection limits: a probe opens
// one connection at a time, so perIP from one IP and 64 in all; a flood on
// it holds only its own places, never the gRPC or Raft ports'. A silent or
// slow client is closed by the HTTP server's ReadHeaderTimeout
// (startHealth), not by a first-byte deadline: connlimit clears every
// deadline at the first byte, which would lift the server's header
// deadline with it.
func healthLimits(perIP int, obs connlimit.Observer, tally *connlimit.Tally) connlimit.Limits {
	return connlimit.Limits{Name: "health", PerIP: perIP, Total: 64, Observer: obs, Tally: tally}
}

// startHealth serves the health endpoints of node on --health-addr (a
// no-op when it is empty), plaintext, bounded by lim and by short read
// and write timeouts. stop closes the listener and every connection.
func startHealth(h healthOptions, node readinessSource, lim connlimit.Limits, log hclog.Logger) (stop func(), err error) {
	if h.addr == "" {
		return func() {}, nil
	}
	raw, err := net.Listen("tcp", h.addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --health-addr %s: %w", h.addr, err)
	}
	lis, err := connlimit.New(raw, lim)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("--health-addr: %w", err)
	}
	srv := &http.Server{
		Handler:           healthHandler{node: node, maxLag: h.lag()},
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          log.Named("health").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health endpoints stopped", "error", err)
		}
	}()
	log.Info("health endpoints serving (plaintext)", "addr", lis.Addr().String(), "livez", "/livez", "readyz", "/readyz", "ready_max_lag", h.lag())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	}, nil
}
