package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollout/rollout/jepsen-lite/flood"
	"github.com/rollout/rollout/jepsen-lite/network"
)

// floodSource is the loopback address the flood comes from where the
// replicas listen on loopback (the proxy network): an address of its own,
// so that a replica's per-address limits see the flood apart from the
// harness's clients (which reach it through the proxy, from 127.0.0.1).
const floodSource = "127.0.0.9"

// flooder is the harness's nemesis.Flooder over package flood.
type flooder struct{ h *harness }

// Flood floods replica's ports from floodSource (proxy network: its real
// listeners, past the proxy) or from the second address of the harness's
// namespace (network namespaces: NetNS.FloodIP), and the gRPC port with
// the "cli" certificate's calls.
func (f flooder) Flood(ctx context.Context, replica string, hold time.Duration) (func(context.Context) (string, error), error) {
	h := f.h
	r := h.c.Replica(replica)
	if r == nil {
		return nil, fmt.Errorf("%w: no replica %q", ErrHarness, replica)
	}
	cfg := flood.Config{}
	ports := []flood.Port{{Name: "grpc", Addr: r.GRPCAddr}, {Name: "raft", Addr: r.RaftAddr}}
	switch n := h.net.(type) {
	case *network.Proxy:
		cfg.Source = floodSource
		ports = []flood.Port{{Name: "grpc", Addr: r.GRPCBind}, {Name: "raft", Addr: r.RaftBind}}
	case *network.NetNS:
		cfg.Source = n.FloodIP()
	}
	if r.HTTPAddr != "" {
		ports = append(ports, flood.Port{Name: "dashboard", Addr: r.HTTPAddr})
	}
	if r.MetricsAddr != "" {
		ports = append(ports, flood.Port{Name: "metrics", Addr: r.MetricsAddr})
	}
	if h.cfg.TLS {
		tc, err := h.c.TLSConfig("cli")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHarness, err)
		}
		cfg.TLS = tc
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan flood.Stats, 1)
	go func() { done <- flood.Run(fctx, cfg, ports, hold) }()
	return func(context.Context) (string, error) {
		cancel()
		st := <-done
		h.mu.Lock()
		h.floods = h.floods.Add(st)
		h.mu.Unlock()
		return st.String(), nil
	}, nil
}

// replicaProblems returns what the flood checker fails on: replica log
// lines saying the process ran out of files, and a process that exited
// unexpectedly. logDir holds the processes' NAME.log.
func (h *harness) replicaProblems(logDir string) []string {
	var out []string
	for _, id := range h.shape.replicas {
		f, err := os.Open(filepath.Join(logDir, id+".log"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n := 0
		first := ""
		for sc.Scan() {
			if strings.Contains(sc.Text(), "too many open files") {
				if n == 0 {
					first = sc.Text()
				}
				n++
			}
		}
		f.Close()
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %d log lines say \"too many open files\", the first: %.200s", id, n, first))
		}
	}
	if h.c != nil {
		for _, p := range h.c.UnexpectedAll() {
			if h.revokedWorker(p.Name) {
				continue // cut off by the certs nemesis: it may give up
			}
			out = append(out, fmt.Sprintf("%s exited although no nemesis killed it", p.Name))
			break
		}
	}
	return out
}
