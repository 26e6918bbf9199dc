package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/jepsen-lite/nemesis"
)

var (
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("runner: invalid config")
	// ErrHarness wraps every failure of the harness itself (as opposed to
	// a violation found in the system under test).
	ErrHarness = errors.New("runner: harness failure")
	// ErrInconclusive means a targeted scenario could not set up the
	// situation it tests.
	ErrInconclusive = errors.New("runner: scenario inconclusive")
	// ErrNoNamespaces means RunInNamespaces could not create the network
	// namespaces (nothing ran; the proxy network is the fallback).
	ErrNoNamespaces = errors.New("runner: network namespaces could not be created")
)

// Scenario names a test.
type Scenario string

// Scenarios.
const (
	ScenarioChaos       Scenario = "chaos"
	ScenarioStraggler   Scenario = "straggler"
	ScenarioStaleLeader Scenario = "stale-leader"
	// ScenarioFederation runs two 3-replica clusters, a parent that hands
	// whole runs to a peer (federation.go).
	ScenarioFederation Scenario = "federation"
)

// Scenarios returns every scenario.
func Scenarios() []Scenario {
	return []Scenario{ScenarioChaos, ScenarioStraggler, ScenarioStaleLeader, ScenarioFederation}
}

// NetMode selects the network.
type NetMode string

// Network modes.
const (
	// NetAuto uses namespaces when possible (root, ip, nft or iptables),
	// else the proxy.
	NetAuto  NetMode = "auto"
	NetNetNS NetMode = "netns"
	NetProxy NetMode = "proxy"
)

// Config configures a run.
type Config struct {
	// BinDir holds rollout-coord and rollout-worker. Required.
	BinDir string
	// OutDir receives the report. Required.
	OutDir string
	// Scenario is the test to run (default chaos).
	Scenario Scenario
	// Duration is how long the nemesis runs (chaos).
	Duration time.Duration
	// Nemeses are the faults of the chaos scenario; nemesis.Hostile adds
	// the hostile client (package hostile) beside them.
	Nemeses []nemesis.Kind
	// Seed decides the nemesis schedule and the workload's randomness.
	Seed int64
	// Replicas and Workers are the process counts (chaos; the targeted
	// scenarios fix their own).
	Replicas, Workers int
	// Runs and ItemsPerRun size the workload (chaos). RangeRuns more runs
	// of ItemsPerRun indexes have the range layout (the ledger's records
	// are ranges, submitted with SubmitRanges over range chunks in their
	// object store, as client/runs submits a store run by default).
	Runs, ItemsPerRun int
	RangeRuns         int
	// Tenants spreads the chaos runs (item runs, then range runs) over
	// that many tenants in turn (0 to 3): team-a and team-b at priority 3
	// with weights 1 and 3, team-c at priority 5 (each tenant's weight is
	// set first, as an admin). The harness then submits and reads as the
	// admin identity (a client certificate may touch only its own
	// tenant's runs), and the tenant checkers run: every tenant's runs
	// finish, under the tenant and priority they were submitted with, and
	// no tenant of one priority starves another. 0 submits every run as
	// the client "cli", as before tenants.
	Tenants int
	// FailureTimeout is the coordinators' --failure-timeout.
	FailureTimeout time.Duration
	// CompletionBound is how long after the last heal the runs must finish.
	CompletionBound time.Duration
	// Net selects the network; NetNSPrefix, when set, attaches to
	// namespaces made by RunInNamespaces (the harness runs inside the
	// control namespace) instead of making any.
	Net         NetMode
	NetNSPrefix string
	// NetNote says why Net was chosen (for the report).
	NetNote string
	// KeepData keeps the replicas' data directories in the report.
	KeepData bool
	// TLS runs every edge over mutual TLS from a dev CA made for the run:
	// Raft and gRPC between replicas, workers, and the harness's own
	// clients (identity "cli"; the straggler presents a certificate named
	// after its worker id). False runs everything in plaintext.
	TLS bool
	// Versitygw is the versitygw binary of the chaos scenario's S3 server
	// (empty: s3server.Binary finds it). The first run keeps its data
	// there, the others in a file:// store; without the binary every run
	// uses file:// and the report says so.
	Versitygw string
	// Logger receives progress. Nil discards it.
	Logger hclog.Logger
}

// DefaultConfig returns the defaults: a 60s chaos run of every nemesis over
// 3 replicas and 4 workers, over mutual TLS.
func DefaultConfig() Config {
	return Config{
		Scenario:        ScenarioChaos,
		Duration:        60 * time.Second,
		Nemeses:         nemesis.AllKinds(),
		Seed:            1,
		Replicas:        3,
		Workers:         4,
		Runs:            2,
		ItemsPerRun:     500,
		RangeRuns:       1,
		Tenants:         3,
		FailureTimeout:  3 * time.Second,
		CompletionBound: 60 * time.Second,
		Net:             NetAuto,
		TLS:             true,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.BinDir == "":
		return fmt.Errorf("%w: BinDir is required", ErrInvalidConfig)
	case c.OutDir == "":
		return fmt.Errorf("%w: OutDir is required", ErrInvalidConfig)
	case c.Duration <= 0:
		return fmt.Errorf("%w: Duration must be > 0", ErrInvalidConfig)
	case c.Replicas < 1 || c.Replicas > 7:
		return fmt.Errorf("%w: Replicas must be 1..7, got %d", ErrInvalidConfig, c.Replicas)
	case c.Workers < 1 || c.Workers > 32:
		return fmt.Errorf("%w: Workers must be 1..32, got %d", ErrInvalidConfig, c.Workers)
	case c.Runs < 1 || c.Runs > 16:
		return fmt.Errorf("%w: Runs must be 1..16, got %d", ErrInvalidConfig, c.Runs)
	case c.RangeRuns < 0 || c.RangeRuns > 4:
		return fmt.Errorf("%w: RangeRuns must be 0..4, got %d", ErrInvalidConfig, c.RangeRuns)
	case c.Tenants < 0 || c.Tenants > maxTenants:
		return fmt.Errorf("%w: Tenants must be 0..%d, got %d", ErrInvalidConfig, maxTenants, c.Tenants)
	case c.ItemsPerRun < 1 || c.ItemsPerRun > 1_000_000:
		return fmt.Errorf("%w: ItemsPerRun must be 1..1000000, got %d", ErrInvalidConfig, c.ItemsPerRun)
	case c.FailureTimeout < 500*time.Millisecond:
		return fmt.Errorf("%w: FailureTimeout must be at least 500ms, got %v", ErrInvalidConfig, c.FailureTimeout)
	case c.CompletionBound <= 0:
		return fmt.Errorf("%w: CompletionBound must be > 0", ErrInvalidConfig)
	}
	switch c.Scenario {
	case ScenarioChaos, ScenarioStraggler, ScenarioStaleLeader:
	case ScenarioFederation:
		if !c.TLS {
			return fmt.Errorf("%w: the federation scenario needs mutual TLS (the parent presents a peer certificate to the peer)", ErrInvalidConfig)
		}
	default:
		return fmt.Errorf("%w: Scenario %q (want chaos, straggler, stale-leader or federation)", ErrInvalidConfig, c.Scenario)
	}
	switch c.Net {
	case NetAuto, NetNetNS, NetProxy:
	default:
		return fmt.Errorf("%w: Net %q (want auto, netns or proxy)", ErrInvalidConfig, c.Net)
	}
	for _, k := range c.Nemeses {
		if !nemesis.Known(k) {
			return fmt.Errorf("%w: Nemeses: %w %q", ErrInvalidConfig, nemesis.ErrUnknownKind, k)
		}
	}
	if c.hostile() {
		switch {
		case !c.TLS:
			return fmt.Errorf("%w: the hostile nemesis needs mutual TLS (its attacks use the cluster's certificates)", ErrInvalidConfig)
		case c.Workers < 2:
			return fmt.Errorf("%w: the hostile nemesis needs at least 2 workers, got %d", ErrInvalidConfig, c.Workers)
		}
	}
	return nil
}

// hostile reports whether the chaos scenario runs the hostile nemesis.
func (c Config) hostile() bool {
	return c.Scenario == ScenarioChaos && slices.Contains(c.Nemeses, nemesis.Hostile)
}

// shape is the cluster a scenario runs.
type shape struct {
	replicas, workers []string
}

// Shape returns the replica and worker names cfg's scenario runs.
func Shape(cfg Config) (replicas, workers []string) {
	s := cfg.shape()
	return s.replicas, s.workers
}

func (c Config) shape() shape {
	if c.Scenario == ScenarioFederation {
		return fedShape()
	}
	nr, nw := c.Replicas, c.Workers
	switch c.Scenario {
	case ScenarioStraggler:
		nr, nw = 3, 2
	case ScenarioStaleLeader:
		nr, nw = 3, 1
	}
	var s shape
	for i := 1; i <= nr; i++ {
		s.replicas = append(s.replicas, fmt.Sprintf("c%d", i))
	}
	for j := 1; j <= nw; j++ {
		s.workers = append(s.workers, fmt.Sprintf("w%d", j))
	}
	return s
}

// Prefix returns the namespace prefix of runs writing into outDir: one out
// directory, one prefix, so a run cleans up what a crashed run with the same
// out directory left behind, and runs into different directories never
// collide.
func Prefix(outDir string) string {
	abs, err := filepath.Abs(outDir)
	if err != nil {
		abs = outDir
	}
	h := sha256.Sum256([]byte(abs))
	return "jl" + hex.EncodeToString(h[:4])
}
