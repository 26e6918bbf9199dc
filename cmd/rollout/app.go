package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/mtls"
)

// coordinator is what submit, status, results and the demo need of a
// coordinator client: what the runs library calls.
type coordinator = runs.Coordinator

var _ coordinator = (*coordclient.Client)(nil)

// coordConn is a coordinator connection the CLI closes when done.
type coordConn interface {
	coordinator
	CancelRun(ctx context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error)
	DeleteRun(ctx context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error)
	Close() error
}

var _ coordConn = (*coordclient.Client)(nil)

// dialCoordclient is the production app.connect.
func dialCoordclient(cfg coordclient.Config) (coordConn, error) { return coordclient.New(cfg) }

// Defaults of the global flags.
const (
	defaultTimeout      = 30 * time.Second
	maxCallTimeout      = 10 * time.Second
	defaultLogLevel     = "error"
	defaultPollInterval = time.Second
)

// app holds the global flags and the streams of one invocation. It is built
// per invocation (no package-level state).
type app struct {
	stdout, stderr io.Writer
	tty            bool
	// started is set once a command's action runs: an error before that is
	// a usage error (bad flags, unknown command).
	started bool

	tls      mtls.Files
	tlsSrc   *mtls.Source // set by tlsConfig: the files, reloaded when they change
	insecure bool
	timeout  time.Duration
	logLevel string

	// connect opens the connection for submit, status and results (a fake
	// in tests).
	connect func(coordclient.Config) (coordConn, error)
	// wait is how the invocation waits for the cluster (wait.go).
	wait *clusterWait
}

func newApp(stdout, stderr io.Writer, tty bool) *app {
	return &app{stdout: stdout, stderr: stderr, tty: tty, connect: dialCoordclient, wait: &clusterWait{stderr: stderr}}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "rollout",
		Short: "Submit, watch and collect batch-inference and training runs on a rollout cluster",
		Long: "rollout talks to a rollout coordinator cluster: it submits a JSONL batch or a training\n" +
			"config as a run, shows progress and status, writes the ordered results (a training run's\n" +
			"per-step loss and accuracy, its weights), describes the replica set, and runs\n" +
			"self-contained demos (a local 3-replica cluster with the leader killed).\n\n" +
			"Every command that talks to the cluster waits for it: a replica not listening yet or a cluster\n" +
			"without a leader is asked again until it answers, up to --timeout (default 30s), and stderr says\n" +
			"once what is waited for. So a command may follow the start of the replicas at once. Errors that\n" +
			"waiting cannot fix (a certificate mismatch, a refused or invalid request) fail at once.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs, // "rollout bogus": unknown command, exit 2
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Help()
			return usagef("no command given")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	a.tls.AddFlags(pf)
	pf.BoolVar(&a.insecure, "insecure", false,
		"talk plaintext to a cluster started with --insecure (no authentication); without it the --tls-* flags are required")
	pf.DurationVar(&a.timeout, "timeout", defaultTimeout,
		"how long one operation waits for a cluster not up yet or without a leader, then fails naming the addresses and the last cause")
	pf.StringVar(&a.logLevel, "log-level", defaultLogLevel, "client log level: trace, debug, info, warn, error or off")
	root.AddCommand(a.submitCmd(), a.statusCmd(), a.resultsCmd(), a.clusterCmd(), a.demoCmd(), a.withRevokeCmds(a.certsCmd()))
	root.AddCommand(a.workerCmd(), a.trainCmd(), a.demoTrainCmd(), a.eventsCmd(), a.cancelCmd(), a.deleteCmd(), a.gcCmd(), a.gatewayCmd())
	root.AddCommand(a.tenantCmd())
	return root
}

// action wraps a command body: it marks the invocation as started (from
// here on only a *usageError exits 2), checks the global flags and runs fn
// with the command's context.
func (a *app) action(fn func(ctx context.Context, cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		a.started = true
		if a.timeout <= 0 {
			return usagef("--timeout must be positive, got %v", a.timeout)
		}
		if a.logLevel != "off" && hclog.LevelFromString(a.logLevel) == hclog.NoLevel {
			return usagef("--log-level %q is not one of trace, debug, info, warn, error, off", a.logLevel)
		}
		a.wait.timeout = a.timeout
		return a.describe(fn(cmd.Context(), cmd))
	}
}

// describe words a failed call of the runs library (returned as is, a
// *runs.CallError) as rpcError does: TLS causes named, the timeout
// attributed to --timeout. Other errors are returned unchanged.
func (a *app) describe(err error) error {
	if ce, ok := err.(*runs.CallError); ok { // only the outermost error: a wrapped one keeps its own wording
		return a.rpcError(ce.Op, ce.Timeout, ce.Err)
	}
	return err
}

// addCoordFlag registers the required --coord flag.
func addCoordFlag(cmd *cobra.Command, p *[]string) {
	cmd.Flags().StringSliceVar(p, "coord", nil, "coordinator gRPC addresses, host:port[,host:port...] (required)")
	_ = cmd.MarkFlagRequired("coord")
}

// parseCoords checks and de-duplicates --coord addresses.
func parseCoords(raw []string) ([]string, error) {
	var addrs []string
	seen := make(map[string]bool)
	for _, r := range raw {
		for _, s := range strings.Split(r, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if err := checkHostPort(s); err != nil {
				return nil, usagef("--coord %q: %v", s, err)
			}
			if !seen[s] {
				seen[s] = true
				addrs = append(addrs, s)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, usagef("--coord needs at least one host:port")
	}
	return addrs, nil
}

// checkHostPort accepts host:port with a non-empty host and a port in
// 1..65535.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("not host:port")
	}
	if host == "" {
		return errors.New("empty host")
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}

// insecureWarning is what --insecure prints on stderr.
const insecureWarning = "rollout: WARNING: --insecure: talking plaintext to the cluster, without authentication"

// tlsConfig loads the --tls-* files. Without them it is a usage error
// naming the flags, unless --insecure is given: then it warns on stderr and
// returns nil (plaintext).
func (a *app) tlsConfig() (*tls.Config, error) {
	switch {
	case a.insecure && a.tls.Enabled():
		return nil, usagef("--insecure cannot be combined with --tls-ca/--tls-cert/--tls-key")
	case a.insecure:
		fmt.Fprintln(a.stderr, insecureWarning)
		return nil, nil
	case !a.tls.Enabled():
		return nil, usagef("no TLS configured: give --tls-ca, --tls-cert and --tls-key (a client or admin certificate, " +
			"made with: rollout certs --dir DIR --names NAME:client), or --insecure for a cluster started with --insecure")
	}
	conf, src, err := a.tls.LoadReloading(mtls.SourceOptions{Warn: a.logger().Named("tls").Error, Info: a.logger().Named("tls").Info})
	if errors.Is(err, mtls.ErrIncompleteFlags) {
		return nil, usagef("--tls-ca, --tls-cert and --tls-key must be given together (or --insecure without any)")
	}
	if err != nil {
		return nil, err
	}
	// A certificate out of its validity would only get the handshake
	// refused by every replica: say so now.
	a.tlsSrc = src
	if leaf := src.Current().Leaf; leaf != nil {
		if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			return nil, fmt.Errorf("--tls-cert %s is not valid now: valid from %s, expired at %s (issue a new one with rollout certs, which reuses the CA in its --dir)",
				a.tls.Cert, leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
		}
	}
	return conf, nil
}

// logger is the client logger at --log-level, writing to stderr.
func (a *app) logger() hclog.Logger {
	if a.logLevel == "off" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "rollout", Level: hclog.LevelFromString(a.logLevel), Output: a.stderr})
}

// clientConfig is the coordclient configuration for addrs under the global
// flags.
func (a *app) clientConfig(addrs []string, tlsConf *tls.Config) coordclient.Config {
	cfg := coordclient.DefaultConfig()
	cfg.Addrs = addrs
	cfg.TLS = tlsConf
	cfg.CallTimeout = min(a.timeout, maxCallTimeout)
	cfg.Logger = a.logger()
	cfg.OnRetry = a.wait.watch(addrs)
	return cfg
}

// client connects to the cluster named by --coord.
func (a *app) client(rawCoords []string) (coordConn, error) {
	addrs, err := parseCoords(rawCoords)
	if err != nil {
		return nil, err
	}
	tlsConf, err := a.tlsConfig()
	if err != nil {
		return nil, err
	}
	return a.connect(a.clientConfig(addrs, tlsConf))
}

// isNotFound reports a gRPC NOT_FOUND (an unknown run).
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// rpcError makes a failed call a one-liner naming what was attempted; a
// TLS mismatch names its cause, a timeout says which flag bounds it and,
// when the cluster was waited for, its addresses and the last failure.
func (a *app) rpcError(what string, timeout time.Duration, err error) error {
	if c := revokedCause(err); c != "" {
		// Told once, and final: name the revocation, not the status.
		return &revokedError{msg: what + ": " + c, err: err}
	}
	if c := tlsCause(err); c != "" && status.Code(err) != codes.PermissionDenied {
		// A TLS mismatch: name it rather than the timeout it ended in.
		return fmt.Errorf("%s: %s: %w", what, c, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return a.deadlineError(what, timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// checkRunName rejects an empty or padded run name.
func checkRunName(run string) error {
	switch {
	case run == "":
		return usagef("--run must name the run")
	case strings.TrimSpace(run) != run:
		return usagef("--run %q has leading or trailing spaces", run)
	}
	return nil
}

// revokedError is an operation refused because the CLI's certificate is
// revoked: its message names the revocation; it wraps the refusal
// (coordclient.ErrRevoked where the client saw it).
type revokedError struct {
	msg string
	err error
}

func (e *revokedError) Error() string { return e.msg }
func (e *revokedError) Unwrap() error { return e.err }
