// Package localcluster controls a local rollout cluster of real processes:
// it starts coordinator replicas (the first bootstraps, the others join
// through it) and workers on loopback, makes their certificates, and kills,
// pauses and restarts them. It is the cluster control of `rollout demo`,
// jepsen-lite and the end-to-end tests, and builds for every platform the
// CLI does (it imports no testing and nothing Linux-only).
//
// Process control is internal/procs: every child runs in its own process
// group, dies with the controlling process (Pdeathsig), and logs to
// Dir/logs/NAME.log. Stop stops the workers, then the replicas, and waits
// for every child, so no process outlives the cluster; Unexpected names a
// child that exited although nobody stopped it.
package localcluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/procs"
)

var (
	// ErrNoLeader means no live replica reported a leader in time.
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrNoIdentity means a TLS cluster has no certificate for the name.
	ErrNoIdentity = errors.New("cluster: no certificate for this identity")
	// ErrExited means a child exited unexpectedly while the cluster formed;
	// the error names the child, how it exited and the last
	// procs.ExitLines lines of its log.
	ErrExited = errors.New("cluster: child exited")
)

// Config describes a cluster.
type Config struct {
	// BinDir holds rollout-coord and rollout-worker.
	BinDir string
	// Dir is the working directory: data/, logs/, tls/.
	Dir string
	// Replicas is the number of coordinator replicas (default 3).
	Replicas int
	// TLS runs every edge over mutual TLS from a dev CA generated in
	// Dir/tls: replicas (Raft and gRPC), workers and the clients of
	// Client and TLSConfig. Certificates are made for the identities "cli"
	// (role client), "gateway" (role gateway: a front end that submits for
	// the tenants it names, as rollout gateway does for its keys), "admin"
	// (unless NoAdminCert), every replica id, "w1" to "wN" (N is
	// CertWorkers) and TLSNames; each carries the SANs
	// localhost, 127.0.0.1, ::1 and the host of every address a replica
	// binds or advertises (so a Placement's addresses verify).
	TLS bool
	// TLSNames are further certificate identities, for example the worker
	// ids of clients that claim and report as a worker (the coordinator
	// requires a worker's certificate Common Name to equal its worker id).
	TLSNames []string
	// CertWorkers is the number of worker identities "w1".."wN" a TLS
	// cluster makes certificates for (default 64).
	CertWorkers int
	// NoAdminCert leaves out the "admin" identity.
	NoAdminCert bool
	// CoordArgs are extra flags for every replica.
	CoordArgs []string
	// Metrics and Pprof give every replica a --metrics-addr and a
	// --pprof-addr on a free loopback port (Replica.MetricsAddr and
	// Replica.PprofAddr). Only without a Placement.
	Metrics, Pprof bool
	// StartTimeout bounds waiting for the cluster to form (default 60s).
	StartTimeout time.Duration
	// Started, if set, is called by Start right after each replica's
	// process starts, before Start waits on it.
	Started func(r *Replica)
	// Dashboards starts every replica with --http-addr on a free loopback
	// port (its read-only web dashboard: Replica.DashboardURL). Not with a
	// Placement.
	Dashboards bool
	// BootstrapExpect starts the replicas at once, each with
	// --bootstrap-expect and --join naming all of them (ExpectArgs), as a
	// StatefulSet starts its pods, instead of bootstrapping c1 and joining
	// the others through it.
	BootstrapExpect bool
	// Standby is how many of the last Replicas are made (addresses, data
	// directory, certificate) but not started: a scale-up starts them
	// later (Replica.RestartWith). Only with BootstrapExpect; Standby
	// equal to Replicas starts none (the caller starts them all).
	Standby int
	// Health starts every replica with --health-addr on a free loopback
	// port (its plaintext /livez and /readyz: Replica.HealthAddr). Not with
	// a Placement.
	Health bool
	// Placement decides where processes run and which addresses replicas
	// use (jepsen-lite puts each in its own network namespace, or behind a
	// proxy). Nil runs every process directly on 127.0.0.1 with free ports.
	Placement Placement
}

// Placement decides where the cluster's processes run and which addresses
// the replicas bind and advertise.
type Placement interface {
	// ReplicaAddrs returns the addresses of replica id ("c1", "c2", ...).
	ReplicaAddrs(id string) (ReplicaAddrs, error)
	// Command returns the argv that runs bin with args as the process named
	// name (a replica or worker id), for example under ip netns exec.
	Command(name, bin string, args []string) []string
}

// ReplicaAddrs are the addresses a replica listens on (Bind) and the ones
// it tells its peers and clients to use (Advertise).
type ReplicaAddrs struct {
	RaftBind, RaftAdvertise string
	GRPCBind, GRPCAdvertise string
}

// Proc is one child process of the cluster: a supervised process (Running,
// Pid, Signal, Kill, Stop, Wait, Tail, ...) with the command it runs.
type Proc struct {
	*procs.Proc
	args []string
	bin  string

	place Placement // nil: run bin directly
}

// Tiers of the supervisor: workers stop before replicas.
const (
	tierReplica = 0
	tierWorker  = 1
)

// Replica is a coordinator replica. RaftAddr and GRPCAddr are the
// addresses others use (advertised); RaftBind and GRPCBind the ones it
// listens on (the same unless a Placement says otherwise).
type Replica struct {
	*Proc
	ID       string
	RaftAddr string
	GRPCAddr string
	RaftBind string
	GRPCBind string
	DataDir  string
	// HTTPAddr is the address of its web dashboard (Config.Dashboards),
	// else "".
	HTTPAddr string
	https    bool
	// MetricsAddr and PprofAddr are the replica's --metrics-addr and
	// --pprof-addr ("" unless Config.Metrics or Config.Pprof).
	MetricsAddr string
	PprofAddr   string
	// HealthAddr is the replica's --health-addr ("" unless Config.Health).
	HealthAddr string
}

// DashboardURL is the address of the replica's web dashboard to open in a
// browser (https with TLS), or "" without Config.Dashboards.
func (r *Replica) DashboardURL() string {
	if r.HTTPAddr == "" {
		return ""
	}
	if r.https {
		return "https://" + r.HTTPAddr + "/"
	}
	return "http://" + r.HTTPAddr + "/"
}

// Worker is a worker process.
type Worker struct {
	*Proc
	ID string
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg      Config
	Replicas []*Replica
	tlsDir   string
	idents   map[string]bool // certificate identities made in tlsDir
	sup      *procs.Supervisor

	mu      sync.Mutex
	workers []*Worker
}

// Start creates Dir's layout, generates TLS material if asked, starts the
// replicas and waits until every one is a voter and a leader serves. On an
// error every child is stopped (their logs stay in Dir/logs); a replica
// that exits on its own meanwhile is ErrExited, naming it and its exit.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.CertWorkers == 0 {
		cfg.CertWorkers = 64
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.BinDir == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: BinDir and Dir are required", ErrInvalidConfig)
	}
	for _, d := range []string{"data", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	c := &Cluster{cfg: cfg, sup: procs.New(filepath.Join(cfg.Dir, "logs"))}
	if cfg.TLS {
		c.tlsDir = filepath.Join(cfg.Dir, "tls")
	}
	if cfg.Dashboards && cfg.Placement != nil {
		return nil, fmt.Errorf("%w: Dashboards needs the default placement", ErrInvalidConfig)
	}
	if cfg.Standby < 0 || cfg.Standby > cfg.Replicas || (cfg.Standby > 0 && !cfg.BootstrapExpect) {
		return nil, fmt.Errorf("%w: Standby must be at most Replicas, and needs BootstrapExpect", ErrInvalidConfig)
	}
	if cfg.Placement != nil && (cfg.Metrics || cfg.Pprof || cfg.Health) {
		return nil, fmt.Errorf("%w: Metrics, Pprof and Health need the default placement", ErrInvalidConfig)
	}
	var ports []int
	if cfg.Placement == nil {
		// One call for every port (separate calls could hand out one port
		// twice): raft and gRPC (2R), metrics and pprof (2R, used or not),
		// the health endpoints (R, when asked for), then the dashboards
		// (the last R).
		n := 4 * cfg.Replicas
		if cfg.Health {
			n += cfg.Replicas
		}
		if cfg.Dashboards {
			n += cfg.Replicas
		}
		p, err := freeport.Ports(n)
		if err != nil {
			return nil, err
		}
		ports = p
	}
	for i := 0; i < cfg.Replicas; i++ {
		id := fmt.Sprintf("c%d", i+1)
		var a ReplicaAddrs
		if cfg.Placement == nil {
			a.RaftBind = fmt.Sprintf("127.0.0.1:%d", ports[2*i])
			a.GRPCBind = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		} else {
			pa, err := cfg.Placement.ReplicaAddrs(id)
			if err != nil {
				return nil, fmt.Errorf("cluster: placing %s: %w", id, err)
			}
			a = pa
		}
		a.RaftAdvertise = cmp.Or(a.RaftAdvertise, a.RaftBind)
		a.GRPCAdvertise = cmp.Or(a.GRPCAdvertise, a.GRPCBind)
		if a.RaftBind == "" || a.GRPCBind == "" {
			return nil, fmt.Errorf("%w: placement gave %s no bind address", ErrInvalidConfig, id)
		}
		r := &Replica{
			ID:       id,
			RaftAddr: a.RaftAdvertise,
			GRPCAddr: a.GRPCAdvertise,
			RaftBind: a.RaftBind,
			GRPCBind: a.GRPCBind,
			DataDir:  filepath.Join(cfg.Dir, "data", id),
		}
		sp, err := c.sup.Add(id, tierReplica)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		r.Proc = &Proc{Proc: sp, bin: filepath.Join(cfg.BinDir, "rollout-coord"), place: cfg.Placement}
		r.args = []string{"--id", id, "--data", r.DataDir, "--raft-addr", r.RaftBind, "--grpc-addr", r.GRPCBind}
		if r.RaftAddr != r.RaftBind {
			r.args = append(r.args, "--raft-advertise", r.RaftAddr)
		}
		if r.GRPCAddr != r.GRPCBind {
			r.args = append(r.args, "--grpc-advertise", r.GRPCAddr)
		}
		if cfg.Dashboards {
			r.HTTPAddr, r.https = fmt.Sprintf("127.0.0.1:%d", ports[len(ports)-cfg.Replicas+i]), cfg.TLS
			r.args = append(r.args, "--http-addr", r.HTTPAddr)
		}
		if cfg.Metrics {
			r.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*cfg.Replicas+2*i])
			r.args = append(r.args, "--metrics-addr", r.MetricsAddr)
		}
		if cfg.Pprof {
			r.PprofAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*cfg.Replicas+2*i+1])
			r.args = append(r.args, "--pprof-addr", r.PprofAddr)
		}
		if cfg.Health {
			r.HealthAddr = fmt.Sprintf("127.0.0.1:%d", ports[4*cfg.Replicas+i])
			r.args = append(r.args, "--health-addr", r.HealthAddr)
		}
		r.args = append(r.args, c.TLSArgs(id)...)
		r.args = append(r.args, cfg.CoordArgs...)
		c.Replicas = append(c.Replicas, r)
	}
	if cfg.TLS {
		if err := c.makeCerts(); err != nil {
			return nil, err
		}
	}
	if err := c.form(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// form starts the replicas, c1 with --bootstrap and, once it leads, the
// others with --join, and waits for every voter, within StartTimeout. It
// gives up at once when a child exits unexpectedly (ErrExited).
func (c *Cluster) form(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		for {
			select {
			case <-watchDone:
				return
			case <-time.After(100 * time.Millisecond):
				if c.sup.Unexpected() != nil {
					cancel()
					return
				}
			}
		}
	}()
	exited := func(err error) error {
		if p := c.sup.Unexpected(); p != nil {
			return fmt.Errorf("%w: %s", ErrExited, p.ExitReport(procs.ExitLines))
		}
		return err
	}
	if c.cfg.BootstrapExpect {
		return c.formExpect(ctx, exited)
	}
	for i, r := range c.Replicas {
		extra := []string{"--bootstrap"}
		if i > 0 {
			extra = []string{"--join", c.Replicas[0].GRPCAddr}
		}
		if err := r.start(extra...); err != nil {
			return err
		}
		if c.cfg.Started != nil {
			c.cfg.Started(r)
		}
		if i == 0 {
			if _, _, err := c.WaitLeader(ctx); err != nil {
				return exited(fmt.Errorf("first replica: %w", err))
			}
		}
	}
	if err := c.WaitVoters(ctx, c.cfg.Replicas); err != nil {
		return exited(err)
	}
	return nil
}

// makeCerts generates the dev CA and a certificate per identity, valid for
// every host the replicas bind or advertise.
func (c *Cluster) makeCerts() error {
	certs := []mtls.Cert{{Name: "cli", Role: mtls.RoleClient}, {Name: "gateway", Role: mtls.RoleGateway}}
	if !c.cfg.NoAdminCert {
		certs = append(certs, mtls.Cert{Name: "admin", Role: mtls.RoleAdmin})
	}
	for _, r := range c.Replicas {
		certs = append(certs, mtls.Cert{Name: r.ID, Role: mtls.RoleReplica})
	}
	for i := 1; i <= c.cfg.CertWorkers; i++ {
		certs = append(certs, mtls.Cert{Name: fmt.Sprintf("w%d", i), Role: mtls.RoleWorker})
	}
	for _, n := range c.cfg.TLSNames {
		certs = append(certs, mtls.Cert{Name: n, Role: mtls.RoleWorker})
	}
	c.idents = map[string]bool{}
	var uniq []mtls.Cert
	for _, cert := range certs {
		if !c.idents[cert.Name] {
			c.idents[cert.Name] = true
			uniq = append(uniq, cert)
		}
	}
	var hosts []string
	for _, r := range c.Replicas {
		for _, a := range []string{r.RaftBind, r.RaftAddr, r.GRPCBind, r.GRPCAddr} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("%w: replica %s address %q: %v", ErrInvalidConfig, r.ID, a, err)
			}
			if host != "" && !slices.Contains(hosts, host) {
				hosts = append(hosts, host)
			}
		}
	}
	if err := mtls.GenerateDevCAHosts(c.tlsDir, uniq, hosts, 24*time.Hour); err != nil {
		return fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	return nil
}

// TLSEnabled reports whether the cluster runs over mutual TLS.
func (c *Cluster) TLSEnabled() bool { return c.tlsDir != "" }

// TLSDir is the directory of the dev CA and the certificates, or "" when
// the cluster runs without TLS.
func (c *Cluster) TLSDir() string { return c.tlsDir }

// Identities is the number of certificates the cluster made (0 without
// TLS).
func (c *Cluster) Identities() int { return len(c.idents) }

// hasIdentity reports whether a certificate was made for name (always true
// without TLS: there is nothing to present).
func (c *Cluster) hasIdentity(name string) bool { return c.tlsDir == "" || c.idents[name] }

// TLSConfig returns the mutual-TLS client configuration of the identity
// name, or nil when the cluster runs without TLS. A name without a
// certificate (see Config.TLSNames) is ErrNoIdentity.
func (c *Cluster) TLSConfig(name string) (*tls.Config, error) {
	if c.tlsDir == "" {
		return nil, nil
	}
	if !c.hasIdentity(name) {
		return nil, fmt.Errorf("%w: %q (add it to Config.TLSNames)", ErrNoIdentity, name)
	}
	return mtls.FilesFor(c.tlsDir, name).Load()
}

// TLSArgs returns the --tls-* flags for the named identity, or --insecure
// when the cluster runs without TLS (every binary refuses plaintext without
// it).
func (c *Cluster) TLSArgs(name string) []string {
	if c.tlsDir == "" {
		return mtls.Files{}.Args()
	}
	return mtls.FilesFor(c.tlsDir, name).Args()
}

// GRPCAddrs returns every replica's gRPC address.
func (c *Cluster) GRPCAddrs() []string {
	out := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		out[i] = r.GRPCAddr
	}
	return out
}

// DashboardURLs returns every replica's dashboard address (empty without
// Config.Dashboards).
func (c *Cluster) DashboardURLs() []string {
	var out []string
	for _, r := range c.Replicas {
		if u := r.DashboardURL(); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// CoordFlag is the --coord value naming every replica.
func (c *Cluster) CoordFlag() string { return strings.Join(c.GRPCAddrs(), ",") }

// Client returns a coordinator client for the cluster with the "cli"
// identity. The caller closes it.
func (c *Cluster) Client() (*coordclient.Client, error) {
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.GRPCAddrs()
	cc.CallTimeout = 5 * time.Second
	t, err := c.TLSConfig("cli")
	if err != nil {
		return nil, err
	}
	cc.TLS = t
	return coordclient.New(cc)
}

// Replica returns the replica with the id, or nil.
func (c *Cluster) Replica(id string) *Replica {
	for _, r := range c.Replicas {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// LeaderView is what one replica said about the cluster.
type LeaderView struct {
	Replica *Replica
	Resp    *rolloutv1.ClusterResponse
}

// Views asks every running replica for its view of the cluster.
func (c *Cluster) Views(ctx context.Context) []LeaderView {
	client, err := c.Client()
	if err != nil {
		return nil
	}
	defer client.Close()
	var out []LeaderView
	for _, r := range c.Replicas {
		if !r.Running() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := client.Cluster(cctx, r.GRPCAddr)
		cancel()
		if err == nil {
			out = append(out, LeaderView{Replica: r, Resp: resp})
		}
	}
	return out
}

// WaitLeader waits until a running replica serves as leader (the rule of
// coordclient.ServingLeader), and returns it with its term. When ctx ends
// first the error is ErrNoLeader wrapping ctx's error.
func (c *Cluster) WaitLeader(ctx context.Context) (*Replica, uint64, error) {
	for {
		vs := c.Views(ctx)
		resps := make([]*rolloutv1.ClusterResponse, len(vs))
		for i, v := range vs {
			resps[i] = v.Resp
		}
		if i := coordclient.ServingLeader(resps); i >= 0 {
			return vs[i].Replica, vs[i].Resp.GetHeader().GetTerm(), nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitVoters waits until the leader's configuration has n voters.
func (c *Cluster) WaitVoters(ctx context.Context, n int) error {
	for {
		for _, v := range c.Views(ctx) {
			if v.Resp.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_LEADER {
				continue
			}
			if coordclient.Voters(v.Resp) >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %d voters: %w", n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartWorker starts a worker with the given id and extra flags (for
// example --backend mock --mock-latency 20ms). With TLS the worker presents
// the certificate named id; an id without one is ErrNoIdentity. An id
// started before is procs.ErrDuplicate (Worker.Restart runs it again).
func (c *Cluster) StartWorker(id string, args ...string) (*Worker, error) {
	if !c.hasIdentity(id) {
		return nil, fmt.Errorf("%w: worker %q (add it to Config.TLSNames)", ErrNoIdentity, id)
	}
	sp, err := c.sup.Add(id, tierWorker)
	if err != nil {
		return nil, fmt.Errorf("cluster: worker %q: %w", id, err)
	}
	w := &Worker{ID: id, Proc: &Proc{Proc: sp, bin: filepath.Join(c.cfg.BinDir, "rollout-worker"), place: c.cfg.Placement}}
	w.args = append([]string{"--id", id, "--coord", c.CoordFlag()}, c.TLSArgs(id)...)
	w.args = append(w.args, args...)
	if err := w.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.workers = append(c.workers, w)
	c.mu.Unlock()
	return w, nil
}

// Workers returns the workers started so far.
func (c *Cluster) Workers() []*Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Worker(nil), c.workers...)
}

// Stop stops every process, the workers first, then the replicas: SIGTERM,
// then SIGKILL after a grace period; it waits for all of them.
func (c *Cluster) Stop() { _ = c.Shutdown(5 * time.Second) }

// Shutdown is Stop with the grace period between SIGTERM and SIGKILL
// given; it returns the supervisor's error (procs.Supervisor.StopAll).
func (c *Cluster) Shutdown(grace time.Duration) error { return c.sup.StopAll(grace) }

// Procs returns every process of the cluster, replicas and workers, in the
// order they were added.
func (c *Cluster) Procs() []*procs.Proc { return c.sup.Procs() }

// Unexpected returns a process of the cluster that exited although nobody
// stopped, killed or signalled it to, or nil.
func (c *Cluster) Unexpected() *procs.Proc { return c.sup.Unexpected() }

// UnexpectedAll returns every child that exited unexpectedly (see
// procs.Supervisor.UnexpectedAll).
func (c *Cluster) UnexpectedAll() []*procs.Proc { return c.sup.UnexpectedAll() }

// Restart starts a stopped replica again from its data directory, with no
// bootstrap or join flags.
func (r *Replica) Restart() error { return r.start() }

// Restart starts a stopped worker again with the same flags.
func (w *Worker) Restart() error { return w.start() }

func (p *Proc) start(extra ...string) error {
	args := append(slices.Clone(p.args), extra...)
	argv := append([]string{p.bin}, args...)
	if p.place != nil {
		argv = p.place.Command(p.Name, p.bin, args)
	}
	if err := p.Start(argv...); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}
