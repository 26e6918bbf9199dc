// Command rollout-coord runs one coordinator replica: a Raft member that
// holds the work ledger and serves the rollout gRPC API.
//
//	rollout-coord --id ID --data DIR --raft-addr H:P --grpc-addr H:P
//	    (--bootstrap | --join H:P[,H:P...] | --bootstrap-expect N --join EVERY-REPLICA)
//	    [--dead-server-after D] [--min-voters M]
//	    (--tls-ca CA.pem --tls-cert ID.pem --tls-key ID-key.pem | --insecure)
//	    [--metrics-addr H:P] [--pprof-addr H:P]
//
// Every edge runs mutual TLS: the certificate must be a replica certificate
// (rollout certs --names ID:replica) named by --id. Without the --tls-*
// flags the replica refuses to start unless --insecure is given; it then
// serves plaintext with no authentication, says so in its log and in
// Cluster.
//
// --tls-ca-key (the key of the CA in --tls-ca) lets the replica sign
// certificate renewals (the Renew RPC) for --tls-valid-for; without it Renew
// is refused and certificates are renewed by hand. Unless --tls-renew=false
// the replica renews its own certificate from the cluster once a third of
// its life is left (package internal/certrenew).
//
// --http-addr H:P serves the replica's read-only web dashboard (package
// dashboard): HTTPS with the replica's certificate under TLS, plain HTTP
// (loopback only unless --insecure) without.
//
// --metrics-addr serves Prometheus metrics on GET /metrics and --pprof-addr
// Go's profiles on /debug/pprof/ (both off by default, both
// unauthenticated: bind them to loopback or a private network). A bad
// address stops the replica at start. docs/OBSERVABILITY.md lists the
// metrics.
//
// --bootstrap-expect N starts every replica of a new cluster in parallel with
// the same flags (a StatefulSet): see bootstrap.go. The leader removes a
// replica that has had no Raft contact for --dead-server-after (default
// 10m; 0: never), never below --min-voters voters (server.DeadServerCleanup).
//
// --health-addr H:P serves plaintext GET /livez and /readyz for probes
// (200 or 503 with a one-line reason; ready never means "is the leader"),
// and `rollout-coord probe` asks them for exec probes. --raft-multiplier N
// scales every Raft timeout (health.go, probe.go, timings.go;
// docs/OBSERVABILITY.md).
//
// A replica restarted with an existing --data rejoins its cluster with no
// further flags. SIGTERM or SIGINT shut it down gracefully (a leader transfers
// leadership first); a second signal exits at once.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/dashboard"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
	"github.com/rollout/rollout/server/liveness"
)

type options struct {
	id, data, raftAddr, raftAdvertise, grpcAddr, grpcAdvertise string
	bootstrap                                                  bool
	join                                                       string
	joinTimeout                                                time.Duration
	failureTimeout                                             time.Duration
	heartbeatBudget                                            float64
	heartbeatTimeout, electionTimeout, leaseTimeout            time.Duration
	snapshotThreshold                                          uint64
	snapshotInterval                                           time.Duration
	trailingLogs                                               uint64
	groupCommit                                                bool
	logLevel                                                   string
	tls                                                        mtls.Files
	insecure                                                   bool
	httpAddr                                                   string
	telemetry                                                  telemetry.Flags
	capacityItems, capacityBytes                               uint64
	maxConnsPerClient, maxConns                                int
	stepAsideAfter                                             time.Duration
	refusedEventInterval                                       time.Duration
	renewal                                                    renewOptions
	membership                                                 membershipOptions // bootstrap.go
	health                                                     healthOptions
	raftMultiplier                                             raftMultiplier
	hup                                                        chan os.Signal // SIGHUPs; nil in tests
	clusterName, peersFile                                     string         // federation (issue 42)
}

func main() {
	o := &options{}
	cmd := &cobra.Command{
		Use:           "rollout-coord --id ID --data DIR --raft-addr H:P --grpc-addr H:P (--bootstrap | --join H:P[,H:P...])",
		Short:         "Run one rollout coordinator replica (a Raft member holding the work ledger)",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.membership.expectSet = cmd.Flags().Changed("bootstrap-expect")
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.id, "id", "", "replica id, unique in the cluster (required)")
	f.StringVar(&o.data, "data", "", "data directory for the Raft log, stable store and snapshots (required)")
	f.StringVar(&o.raftAddr, "raft-addr", "", "host:port for Raft traffic between replicas (required)")
	f.StringVar(&o.raftAdvertise, "raft-advertise", "", "Raft address peers dial (default --raft-addr)")
	f.StringVar(&o.grpcAddr, "grpc-addr", "", "host:port for the gRPC API (required)")
	f.StringVar(&o.grpcAdvertise, "grpc-advertise", "", "gRPC address clients are told to use (default --grpc-addr)")
	f.BoolVar(&o.bootstrap, "bootstrap", false, "start a new cluster with this replica as its first voter")
	f.StringVar(&o.join, "join", "", "comma-separated gRPC addresses of existing members to join through")
	f.DurationVar(&o.joinTimeout, "join-timeout", 60*time.Second, "how long to keep trying to join")
	f.IntVar(&o.membership.bootstrapExpect, "bootstrap-expect", 0, "start every replica in parallel with the same flags: --join names every replica's gRPC address, and a replica with no state joins the formed cluster when any peer belongs to one, else bootstraps once all N (this one included) answer with no state (not with --bootstrap)")
	f.IntVar(&o.membership.minVoters, "min-voters", 0, "the dead-server cleanup never leaves fewer voters than this (0: --bootstrap-expect when given, else 3)")
	f.DurationVar(&o.membership.deadServerAfter, "dead-server-after", server.DefaultDeadServerAfter, "the leader removes a replica with no Raft contact for this long, never below --min-voters voters and never leaving fewer live voters than a quorum (0: never)")
	f.DurationVar(&o.failureTimeout, "failure-timeout", server.DefaultConfig().FailureTimeout, "a worker silent this long loses its items: the floor of the TTL, which grows with the fleet (see --heartbeat-budget)")
	f.Float64Var(&o.heartbeatBudget, "heartbeat-budget", liveness.DefaultBudget, "worker heartbeats per second the leader plans for across the fleet: n workers are asked to heartbeat every n/budget seconds (when over a second) and the TTL grows to twice that when it passes --failure-timeout")
	def := raftnode.DefaultConfig()
	f.DurationVar(&o.heartbeatTimeout, "raft-heartbeat-timeout", def.HeartbeatTimeout, "Raft heartbeat timeout")
	f.DurationVar(&o.electionTimeout, "raft-election-timeout", def.ElectionTimeout, "Raft election timeout")
	f.DurationVar(&o.leaseTimeout, "raft-lease-timeout", def.LeaderLeaseTimeout, "Raft leader lease timeout")
	addMultiplierFlag(f, &o.raftMultiplier)
	o.health.addFlags(f)
	f.Uint64Var(&o.snapshotThreshold, "snapshot-threshold", def.SnapshotThreshold, "log entries between snapshots")
	f.DurationVar(&o.snapshotInterval, "snapshot-interval", def.SnapshotInterval, "how often Raft checks whether --snapshot-threshold entries call for a snapshot")
	f.Uint64Var(&o.trailingLogs, "trailing-logs", def.TrailingLogs, "log entries kept after a snapshot (a replica further behind gets the snapshot)")
	f.BoolVar(&o.groupCommit, "group-commit", true, "benchmark knob: --group-commit=false puts every command in a log entry of its own (no batching of concurrent callers); for measuring what group commit buys, not for production")
	f.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	o.tls.AddFlags(f)
	o.renewal.addFlags(f)
	o.telemetry.AddFlags(f)
	f.BoolVar(&o.insecure, "insecure", false, "run without TLS: no caller is authenticated and anyone who reaches the ports can change the ledger (local experiments only)")
	f.StringVar(&o.httpAddr, "http-addr", "", "host:port for the read-only web dashboard (off when empty): HTTPS with the replica's certificate under TLS; plain HTTP only on loopback unless --insecure")
	f.Uint64Var(&o.capacityItems, "capacity-items", 0, "most items the ledger holds; a submit past it is refused whole (0: --capacity-bytes / the ledger's per-item estimate)")
	f.Uint64Var(&o.capacityBytes, "capacity-bytes", 0, "most bytes the ledger's items may cost it (0: half of this machine's memory)")
	f.IntVar(&o.maxConnsPerClient, "max-conns-per-client", connlimit.DefaultPerIP, "most connections one IP address may hold open to each of the gRPC, Raft and dashboard ports; more are closed at once (the Raft port exempts the replicas of its configuration)")
	f.IntVar(&o.maxConns, "max-conns", 0, "most connections the gRPC port holds open (0: half of the process's open-file limit; the Raft port gets an eighth, separately)")
	f.DurationVar(&o.stepAsideAfter, "step-aside-after", 5*time.Second, "a leader whose gRPC port has refused every new connection (at --max-conns, or out of files) this long transfers leadership, at most once a minute (0: never)")
	f.DurationVar(&o.refusedEventInterval, "refused-event-interval", server.DefaultRefusalReportInterval, "the leader records the connections its listeners refused as at most one conns-refused event per listener per this interval (0: none)")
	f.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name (a DNS label: a-z, 0-9, '-'), the prefix of the runs it hands to peers (federation; required with --peers)")
	f.StringVar(&o.peersFile, "peers", "", "TOML file of the peer clusters this one may hand whole runs to ([[peer]] name, coord, tls_ca, tls_cert, tls_key, stores; re-read on SIGHUP, a bad file is refused and the old one kept); off when empty: no connection, no loop")
	cmd.AddCommand(recoverCmd(), probeCmd())

	// SIGHUP reloads the TLS files (run); caught from the start so that it
	// never kills the replica (its default disposition).
	o.hup = make(chan os.Signal, 1)
	signal.Notify(o.hup, syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process
	}()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "rollout-coord:", err)
		os.Exit(1)
	}
}

func (o *options) validate() error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"--id", o.id}, {"--data", o.data}, {"--raft-addr", o.raftAddr}, {"--grpc-addr", o.grpcAddr}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required flags: %s", strings.Join(missing, ", "))
	}
	if o.bootstrap && o.join != "" {
		return errors.New("--bootstrap and --join are mutually exclusive")
	}
	if err := o.membership.validate(o.bootstrap, o.join); err != nil {
		return err
	}
	if o.insecure && o.tls.Enabled() {
		return errors.New("--insecure cannot be combined with --tls-ca/--tls-cert/--tls-key")
	}
	if !o.insecure && !o.tls.Enabled() {
		return errNoTLS
	}
	if err := o.renewal.validate(o.insecure); err != nil {
		return err
	}
	if o.maxConnsPerClient < 0 || o.maxConns < 0 {
		return errors.New("--max-conns-per-client and --max-conns must not be negative")
	}
	if o.refusedEventInterval < 0 || o.stepAsideAfter < 0 {
		return errors.New("--refused-event-interval and --step-aside-after must not be negative")
	}
	if err := validateMultiplier(o.raftMultiplier.get()); err != nil {
		return err
	}
	if err := o.health.validate(); err != nil {
		return err
	}
	if o.httpAddr != "" {
		if err := dashboard.CheckAddr(o.httpAddr, o.tls.Enabled(), o.insecure); err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
	}
	return nil
}

var (
	// errNoTLS is the refusal to start without TLS or --insecure.
	errNoTLS = errors.New("no TLS configured: give --tls-ca, --tls-cert and --tls-key " +
		"(a replica certificate named by --id, made with: rollout certs --dir DIR --names ID:replica,...), " +
		"or --insecure to run without authentication")
)

// loadTLS loads the --tls-* files as a reloading source (mtls.Source:
// re-read when they change, and on SIGHUP) that refuses the certificates
// revs holds, and checks that the certificate is a replica certificate
// named by --id (peers admit to the Raft port only the replicas of their
// configuration, by certificate name). It returns nils with --insecure.
func (o *options) loadTLS(log hclog.Logger, revs *mtls.Revocations) (*tls.Config, *mtls.Source, error) {
	if o.insecure {
		return nil, nil, nil
	}
	// Every load (this one, SIGHUP, a file changed and noticed at a
	// handshake) refuses a certificate that is not this replica's, and a
	// reload keeps the previous one (logged at ERROR, naming the file and
	// the identity found).
	src, err := o.tls.NewSource(mtls.SourceOptions{Warn: log.Named("tls").Error, Info: log.Named("tls").Info, Revocations: revs,
		Expect: &mtls.Identity{Name: o.id, Role: mtls.RoleReplica}})
	if errors.Is(err, mtls.ErrWrongIdentity) || errors.Is(err, mtls.ErrNoRole) {
		return nil, nil, fmt.Errorf("%w; a replica needs a certificate of role replica named %q (rollout certs --names %s:replica)", err, o.id, o.id)
	}
	if err != nil {
		return nil, nil, err
	}
	return src.Config(), src, nil
}

func run(ctx context.Context, o *options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := checkFederationFlags(o); err != nil {
		return err
	}
	peerFile, err := loadPeers(o)
	if err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "coord." + o.id, Level: hclog.LevelFromString(o.logLevel), Output: os.Stderr})
	grpcAdv := firstNonEmpty(o.grpcAdvertise, o.grpcAddr)
	if err := advertisable(grpcAdv); err != nil {
		return fmt.Errorf("--grpc-advertise: %w", err)
	}

	revs := mtls.NewRevocations(func(id mtls.Identity, serial string, n int) {
		log.Warn("closed the connections of a revoked certificate", "name", id.Name, "role", id.Role, "serial", serial, "connections", n)
	})
	tlsConf, tlsSrc, err := o.loadTLS(log, revs)
	if err != nil {
		return err
	}
	renewCA, err := o.renewal.loadCA(o.tls.CA, log)
	if err != nil {
		return err
	}
	// SIGHUP reloads (from now on it no longer kills the process).
	hupCtx, stopHUP := context.WithCancel(context.Background())
	defer stopHUP()
	go tlsSrc.ReloadOn(hupCtx, o.hup, log.Info)
	if o.insecure {
		// Whatever --log-level says.
		fmt.Fprintln(os.Stderr, "rollout-coord: WARNING: INSECURE: running without TLS (--insecure): no caller is "+
			"authenticated; anyone who reaches the gRPC or Raft port can read and change the ledger and the membership")
	}

	tel, err := startTelemetry(o.telemetry, log)
	if err != nil {
		return err
	}
	defer tel.Close()
	if tel.Registry != nil {
		if err := telemetry.RegisterCertExpiry(tel.Registry, tlsSrc); err != nil {
			return err
		}
	}

	ledger, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		return err
	}
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr, rc.AdvertiseAddr = o.id, o.data, o.raftAddr, o.raftAdvertise
	if err := raftTimings(&rc, o, log); err != nil {
		return err
	}
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = o.snapshotThreshold, o.snapshotInterval, o.trailingLogs
	if !o.groupCommit {
		rc.MaxBatchCommands = 1
	}
	rc.Logger = log.Named("raft")
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(term uint64) ([]byte, error) {
		return fsm.EpochCommand(o.id, grpcAdv)
	}
	rc.TLS = tlsConf
	if tlsConf != nil {
		rc.Revocations = revs
	}
	rc.FatalResult = corruptEntry
	rc.Observer = tel.raftObserver()
	lims := connLimits(o, log, tel.ConnObserver())
	rc.Conns = lims.raft

	raw, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen on --grpc-addr %s: %w", o.grpcAddr, err)
	}
	// grpc.ConnectionTimeout (server.GRPCOptions) bounds the handshake of
	// each connection; the listener bounds how many are held.
	lis, err := connlimit.New(raw, lims.grpc)
	if err != nil {
		raw.Close()
		return err
	}
	node, err := raftnode.New(rc, ledger)
	if err != nil {
		lis.Close()
		return err
	}

	sc := server.DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr, sc.FailureTimeout, sc.Logger = o.id, grpcAdv, o.failureTimeout, log
	sc.ClusterName = o.clusterName
	if peerFile != nil {
		watchPeers(hupCtx, peerFile, o, log)
		sc.Peers = peerFile
	}
	sc.HeartbeatBudget = o.heartbeatBudget
	sc.Insecure = o.insecure
	sc.PeerTLS = tlsConf
	sc.TLSSource = tlsSrc
	if tlsConf != nil {
		sc.Revocations = revs
	}
	sc.Observer = tel.commandObserver()
	sc.CapacityItems, sc.CapacityBytes = capacity(o.capacityItems, o.capacityBytes)
	sc.RenewCA, sc.RenewValidFor = renewCA, o.renewal.validFor
	log.Info("ledger capacity", "items", sc.CapacityItems, "bytes", sc.CapacityBytes)
	svc, err := server.New(sc, node, ledger)
	if err == nil {
		err = tel.watch(node, ledger, svc)
	}
	if err != nil {
		lis.Close()
		_ = node.Shutdown(context.Background())
		return err
	}
	// Metrics first (refusals count too), then roles, then the message limit
	// and the in-flight request budget.
	gopts := append(tel.grpcOptions(), server.NewAuthz(o.insecure).WithRevocations(sc.Revocations).ServerOptions()...)
	gopts = append(gopts, svc.GRPCOptions()...)
	if tlsConf != nil {
		// The gRPC port completes the handshake of a revoked certificate so
		// that every call it makes is told why it is refused (Authz); the
		// Raft port refuses it at the handshake.
		gopts = append(gopts, grpc.Creds(revs.TellingCreds(credentials.NewTLS(tlsSrc.ConfigAdmittingRevoked()))))
	}
	g := grpc.NewServer(gopts...)
	svc.RegisterOn(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()

	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	go svc.RunFailureScan(bg)
	go svc.RunRevocations(bg)
	go svc.RunFederation(bg) // returns at once without --peers
	go trackHealth(bg, node, hs)
	if o.stepAsideAfter > 0 {
		go stepAside(bg, node, lis, svc, o.stepAsideAfter, time.Second, log)
	}
	if o.refusedEventInterval > 0 {
		go svc.ReportRefusals(bg, lims.tally, o.refusedEventInterval)
	}
	if o.membership.deadServerAfter > 0 {
		go func() { _ = svc.DeadServerCleanup(bg, o.membership.deadServerAfter, o.membership.effectiveMinVoters()) }()
	}

	// Live (and not ready) while it joins or waits for its peers.
	stopHealth, err := startHealth(o.health, node, healthLimits(o.maxConnsPerClient, tel.ConnObserver(), lims.tally), log)
	if err != nil {
		return shutdown(log, node, g, err)
	}
	defer stopHealth()

	switch {
	case node.HasState():
		log.Info("restarting from existing data; rejoining the cluster", "data", o.data)
		if o.membership.bootstrapExpect > 0 {
			register := func(ctx context.Context) error { return join(ctx, o, grpcAdv, tlsConf, log) }
			go checkMembership(bg, o, o.id, grpcAdv, tlsConf, log, register)
		}
	case o.bootstrap:
		if err := node.Bootstrap(); err != nil {
			return shutdown(log, node, g, fmt.Errorf("bootstrap: %w", err))
		}
		log.Info("bootstrapped a new cluster")
	case o.membership.bootstrapExpect > 0:
		register := func(ctx context.Context) error { return join(ctx, o, grpcAdv, tlsConf, log) }
		if err := bootstrapExpect(ctx, o, node, tlsConf, log, register); err != nil {
			return shutdown(log, node, g, err)
		}
	case o.join != "":
		if err := join(ctx, o, grpcAdv, tlsConf, log); err != nil {
			return shutdown(log, node, g, err)
		}
	default:
		return shutdown(log, node, g, errors.New("no existing state in --data: give --bootstrap to start a cluster, --join to join one, or --bootstrap-expect N with --join naming every replica"))
	}
	log.Info("replica running", "id", o.id, "raft", o.raftAddr, "grpc", grpcAdv)
	renewDone := startRenewal(bg, o, tlsConf, grpcAdv, ledger, log)
	defer func() { cancelBG(); renewDone() }()
	if o.httpAddr != "" {
		stopDashboard, err := startDashboard(o, grpcAdv, tlsConf, svc, ledger, lims.dashboard, log)
		if err != nil {
			return shutdown(log, node, g, err)
		}
		defer stopDashboard()
	}

	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
		return shutdown(log, node, g, nil)
	case err := <-serveErr:
		return shutdown(log, node, g, fmt.Errorf("grpc server: %w", err))
	case <-node.Fatal():
		// raft.db (DIR/raft.db), log entry N ...: fails its checksum. Raft is
		// already stopped; exit non-zero rather than serve a diverged ledger.
		err := node.FatalErr()
		log.Error("stopping: this replica's log cannot be applied as the cluster applied it", "error", err)
		return shutdown(log, node, g, err)
	}
}

// listenerLimits are the connection limits of a replica's listeners;
// tally adds up their refusals (for the conns-refused events).
type listenerLimits struct {
	grpc, raft, dashboard connlimit.Limits
	tally                 *connlimit.Tally
}

// connLimits raises the open-file limit as far as allowed, logs it, and
// divides it between the listeners: the gRPC port half of it (or
// --max-conns), the Raft port an eighth, the dashboard a sixteenth (at
// most 512); the operator ports hold 256 each (internal/telemetry). The rest is
// left for the Raft log, snapshots and outgoing connections. Each port
// admits at most --max-conns-per-client connections from one IP (the Raft
// port exempts its configuration's replicas).
func connLimits(o *options, log hclog.Logger, obs connlimit.Observer) listenerLimits {
	nofile, raised, err := connlimit.FileLimit()
	if err != nil {
		log.Warn("cannot read the open-file limit; assuming 1024", "error", err)
		nofile = 1024
	}
	l := listenerLimits{
		grpc: connlimit.Limits{Name: "grpc", PerIP: o.maxConnsPerClient, Total: o.maxConns, Observer: obs},
		raft: raftnode.DefaultConfig().Conns,
	}
	if l.grpc.Total == 0 {
		l.grpc.Total = connlimit.Share(nofile, 1, 2)
	}
	l.raft.PerIP, l.raft.Total, l.raft.Observer = o.maxConnsPerClient, connlimit.Share(nofile, 1, 8), obs
	l.dashboard = dashboard.DefaultLimits(obs)
	l.dashboard.PerIP = o.maxConnsPerClient
	l.dashboard.Total = min(l.dashboard.Total, connlimit.Share(nofile, 1, 16))
	l.tally = connlimit.NewTally()
	l.grpc.Tally, l.raft.Tally, l.dashboard.Tally = l.tally, l.tally, l.tally
	log.Info("open-file limit and connection limits", "nofile", nofile, "raised_to_hard_limit", raised,
		"grpc_max_conns", l.grpc.Total, "raft_max_conns", l.raft.Total, "dashboard_max_conns", l.dashboard.Total,
		"max_conns_per_client", o.maxConnsPerClient)
	return l
}

// leaderNode is what stepAside needs of the replica; *raftnode.Node has it.
type leaderNode interface {
	ID() string
	ServingTerm() (uint64, bool)
	Members() ([]raftnode.Member, error)
	TransferLeadershipTo(ctx context.Context, id string) error
}

// stepNoter records a step-aside in the ledger's event history;
// *server.Server has it.
type stepNoter interface {
	NoteSteppedAside(ctx context.Context, why, to string) error
}

// saturation is what stepAside needs of the listener; *connlimit.Listener
// has it.
type saturation interface {
	Saturated(now time.Time) (since time.Time, ok bool)
}

// stepAsideCooldown is the least time between two leadership transfers
// stepAside makes.
const stepAsideCooldown = time.Minute

// stepAside transfers leadership away from this replica when, as the
// serving leader, its gRPC listener has been saturated (see
// connlimit.Listener.Saturated) for after: a leader that cannot take new
// connections is no leader for its clients, and a flood aimed at it stays
// on this replica when leadership moves. It checks every tick and steps
// aside at most once per stepAsideCooldown. Stepping aside tries the
// other voters in id order until one takes leadership; before each try it
// records an EventLeaderSteppedAside naming why and the voter (the new
// leader's leader-elected event, naming this replica as the previous
// leader, confirms that the transfer happened).
func stepAside(ctx context.Context, node leaderNode, lis saturation, note stepNoter, after, tick time.Duration, log hclog.Logger) {
	t := time.NewTicker(tick)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		since, full := lis.Saturated(now)
		if !full || now.Sub(since) < after || now.Sub(last) < stepAsideCooldown {
			continue
		}
		if _, leader := node.ServingTerm(); !leader {
			continue
		}
		last = now
		why := fmt.Sprintf("the gRPC port has refused every new connection for %s (at --max-conns, or out of files)", now.Sub(since).Round(time.Second))
		log.Warn("the gRPC port has refused every new connection; transferring leadership", "for", now.Sub(since).Round(time.Second))
		handOver(ctx, node, note, why, log)
	}
}

// handOver tries the other voters in id order until one takes leadership,
// noting each try first; it gives up when this replica is no longer the
// leader.
func handOver(ctx context.Context, node leaderNode, note stepNoter, why string, log hclog.Logger) {
	members, err := node.Members()
	if err != nil {
		log.Warn("leadership transfer: cannot read the configuration", "error", err)
		return
	}
	var targets []string
	for _, m := range members {
		if m.Suffrage == "Voter" && m.ID != node.ID() {
			targets = append(targets, m.ID)
		}
	}
	slices.Sort(targets)
	if len(targets) == 0 {
		log.Warn("leadership transfer: no other voter to hand leadership to")
		return
	}
	for _, to := range targets {
		if _, leader := node.ServingTerm(); !leader {
			return
		}
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := note.NoteSteppedAside(nctx, why, to); err != nil {
			log.Warn("could not record the step-aside event", "to", to, "error", err)
		}
		cancel()
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := node.TransferLeadershipTo(tctx, to)
		cancel()
		if err == nil {
			log.Info("handed leadership over", "to", to)
			return
		}
		log.Warn("leadership transfer failed", "to", to, "error", err)
	}
}

// corruptEntry is raftnode's Config.FatalResult: the ledger's refusal of a
// damaged log entry (fsm.ErrCorruptEntry) stops the replica.
func corruptEntry(resp any) error {
	if err, ok := resp.(error); ok && errors.Is(err, fsm.ErrCorruptEntry) {
		return err
	}
	return nil
}

// join asks the given members to add this replica, following leader hints,
// until it succeeds or the join timeout passes.
func join(ctx context.Context, o *options, grpcAdv string, clientTLS *tls.Config, log hclog.Logger) error {
	cc := coordclient.DefaultConfig()
	cc.Addrs = splitAddrs(o.join)
	cc.TLS = clientTLS
	cc.Logger = log.Named("join")
	cc.CallTimeout = o.joinTimeout // the leader waits for this replica to catch up before it answers
	client, err := coordclient.New(cc)
	if err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	defer client.Close()
	jctx, cancel := context.WithTimeout(ctx, o.joinTimeout)
	defer cancel()
	raftAdv := firstNonEmpty(o.raftAdvertise, o.raftAddr)
	_, err = client.Join(jctx, &rolloutv1.JoinRequest{Id: o.id, RaftAddr: raftAdv, GrpcAddr: grpcAdv})
	if err != nil {
		return fmt.Errorf("join through %s: %w", o.join, err)
	}
	log.Info("joined the cluster", "through", o.join)
	return nil
}

// shutdown stops serving and shuts the replica down gracefully (a leader
// transfers leadership first). It returns cause.
func shutdown(log hclog.Logger, node *raftnode.Node, g *grpc.Server, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Shutdown(ctx); err != nil {
		log.Warn("raft shutdown", "error", err)
	}
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		g.Stop()
	}
	return cause
}

// trackHealth reports the Coordinator service as SERVING only while this
// replica is the serving leader; the process itself is always SERVING.
func trackHealth(ctx context.Context, node *raftnode.Node, hs *health.Server) {
	const svc = "rollout.v1.Coordinator"
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	last := healthpb.HealthCheckResponse_UNKNOWN
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if _, ok := node.ServingTerm(); ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		if st != last {
			hs.SetServingStatus(svc, st)
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// advertisable rejects addresses others cannot dial.
func advertisable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if port == "0" {
		return fmt.Errorf("%q: port 0 cannot be advertised", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%q: an unspecified host cannot be advertised; set an explicit address", addr)
	}
	return nil
}
