// Package telemetry serves the operator endpoints of the rollout binaries:
// Prometheus metrics (--metrics-addr, GET /metrics) and Go's pprof profiles
// (--pprof-addr, /debug/pprof/). Both are off unless their flag is given.
//
// Each listener has its own http.ServeMux, and the profiles are served from
// runtime/pprof (net/http/pprof is not imported: its init registers on
// http.DefaultServeMux), so no other server of the process exposes profiles
// by accident. Neither endpoint authenticates or encrypts: bind them to
// loopback or a private network (an address such as 127.0.0.1:9090), never
// to an interface others can reach. A profile reveals memory contents and
// the metrics name runs and workers.
//
// A bad address fails at start (Listen), with an error naming the flag and
// the address, before the binary does anything else.
//
// Each listener bounds its connections (package internal/connlimit; Start uses
// OperatorLimits): a flood against an operator port cannot take the
// process's open files. With --metrics-addr, Start also registers the
// connection metrics (ConnMetrics) that every connection-limited listener
// of the binary reports to (Endpoints.ConnObserver).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/rollout/rollout/internal/connlimit"
)

// ErrBadAddr is wrapped by Listen's refusal of an address.
var ErrBadAddr = errors.New("telemetry: bad listen address")

// Server is one running operator listener.
type Server struct {
	lis net.Listener
	srv *http.Server
}

// NewRegistry returns a fresh registry (never the global default one) with
// the Go runtime and process collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler returns the mux of a metrics listener: GET /metrics in the
// Prometheus exposition formats, from g only.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// Listen binds addr (host:port; port 0 picks a free one) for the listener
// of flag (for example "--metrics-addr") and serves h on it until Close. A
// malformed or unbindable address is an error wrapping ErrBadAddr that
// names flag and addr.
func Listen(flag, addr string, h http.Handler, log hclog.Logger) (*Server, error) {
	return ListenLimited(flag, addr, h, connlimit.Limits{}, log)
}

// OperatorLimits are the connection limits of an operator listener named
// name ("metrics", "pprof"): connlimit.DefaultPerIP per IP and 256 in all;
// the HTTP server's ReadHeaderTimeout (10 s) closes a client that says
// nothing.
func OperatorLimits(name string, o connlimit.Observer) connlimit.Limits {
	return connlimit.Limits{Name: name, PerIP: connlimit.DefaultPerIP, Total: 256, Observer: o}
}

// ListenLimited is Listen with the listener's connections bounded by lim.
func ListenLimited(flag, addr string, h http.Handler, lim connlimit.Limits, log hclog.Logger) (*Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: %s %q is not host:port (for example 127.0.0.1:9090): %v", ErrBadAddr, flag, addr, err)
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", ErrBadAddr, flag, addr, err)
	}
	lis, err := connlimit.New(raw, lim)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Server{lis: lis, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			log.Error("operator listener stopped", "flag", flag, "error", err)
		}
	}()
	log.Info("serving unauthenticated operator endpoint; keep it on loopback or a private network", "flag", flag, "addr", lis.Addr().String())
	return s, nil
}

// Addr returns the address the listener is bound to (with the port chosen
// for port 0).
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the listener, letting requests in progress finish for up to a
// second. It is safe on a nil Server.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	return err
}

// Flags are the --metrics-addr and --pprof-addr flags of a binary.
type Flags struct {
	MetricsAddr, PprofAddr string
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics on GET /metrics at host:port (off by default; unauthenticated: bind to loopback or a private network)")
	fs.StringVar(&f.PprofAddr, "pprof-addr", "", "serve Go pprof profiles on /debug/pprof/ at host:port (off by default; unauthenticated: bind to loopback or a private network)")
}

// Endpoints are the listeners Start opened.
type Endpoints struct {
	// Registry is what /metrics serves; nil without --metrics-addr. The
	// binary registers its metric set on it.
	Registry *prometheus.Registry
	// Metrics and Pprof are the listeners (nil when their flag is empty).
	Metrics, Pprof *Server
	// Conns counts the binary's connection-limited listeners; nil without
	// --metrics-addr.
	Conns *ConnMetrics
}

// ConnObserver is what the binary's connection-limited listeners report
// to: Conns, or nil without --metrics-addr.
func (e *Endpoints) ConnObserver() connlimit.Observer {
	if e == nil || e.Conns == nil {
		return nil
	}
	return e.Conns
}

// Start opens the listeners f asks for. A bad address is an error wrapping
// ErrBadAddr, and then nothing is left open.
func Start(f Flags, log hclog.Logger) (*Endpoints, error) {
	e := &Endpoints{}
	if f.MetricsAddr != "" {
		e.Registry = NewRegistry()
		conns, err := NewConnMetrics(e.Registry)
		if err != nil {
			return nil, err
		}
		e.Conns = conns
		s, err := ListenLimited("--metrics-addr", f.MetricsAddr, MetricsHandler(e.Registry), OperatorLimits("metrics", e.ConnObserver()), log)
		if err != nil {
			return nil, err
		}
		e.Metrics = s
	}
	if f.PprofAddr != "" {
		s, err := ListenLimited("--pprof-addr", f.PprofAddr, PprofHandler(), OperatorLimits("pprof", e.ConnObserver()), log)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.Pprof = s
	}
	return e, nil
}

// Close closes the listeners.
func (e *Endpoints) Close() {
	_ = e.Metrics.Close()
	_ = e.Pprof.Close()
}
