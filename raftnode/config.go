package raftnode

import (
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/mtls"

	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Config configures a Node. Start from DefaultConfig, fill in ID, DataDir,
// RaftAddr, EncodeBatch and EpochCommand, and call Validate (New does).
type Config struct {
	// ID is this server's raft.ServerID; unique and stable across restarts.
	ID string

	// DataDir holds everything the node persists: raft.db (the raft-boltdb
	// log and stable store) and snapshots/ (the FileSnapshotStore). It is
	// created with mode 0700 if missing.
	DataDir string

	// RaftAddr is the host:port the raft transport binds. Port 0 binds an
	// ephemeral port; Node.Addr reports the one chosen.
	RaftAddr string

	// AdvertiseAddr is the host:port peers dial to reach this node. Empty
	// means RaftAddr (with the bound port when RaftAddr's port is 0). Its
	// host must be specific: not empty, not 0.0.0.0 or ::.
	AdvertiseAddr string

	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and
	// CommitTimeout are handed to hashicorp/raft unchanged (see raft.Config).
	// A follower that hears no leader for HeartbeatTimeout starts an
	// election; a leader that cannot reach a quorum for LeaderLeaseTimeout
	// steps down. LeaderLeaseTimeout <= HeartbeatTimeout <= ElectionTimeout.
	// An idle leader sends each follower an AppendEntries every 1–2 ×
	// CommitTimeout (how followers learn the commit index after the last
	// write) besides the heartbeats: the default 50 ms halves an idle
	// replica's CPU against 5 ms; a follower's applied state (its
	// dashboard) trails the leader's by up to 100 ms after a burst ends.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// SnapshotInterval, SnapshotThreshold and TrailingLogs control
	// automatic snapshots and log compaction (see raft.Config).
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64

	// SnapshotRetain is how many snapshots the FileSnapshotStore keeps.
	SnapshotRetain int

	// MaxBatchCommands bounds how many commands one log entry carries.
	MaxBatchCommands int

	// MaxBatchBytes bounds the summed command sizes of one log entry (a
	// batch always takes at least one command). A single command larger
	// than this is refused with ErrInvalidArgument. The default (8 MiB) is
	// the coordinator's gRPC message limit (api/validate), so every command
	// a valid request becomes fits.
	MaxBatchBytes int

	// MaxInflightBatches bounds the batches handed to raft and not yet
	// applied. While that many are in flight, new commands queue up and form
	// the next batch.
	MaxInflightBatches int

	// ApplyTimeout bounds how long raft may take to accept a batch, a
	// barrier or a membership change (the enqueue timeout of raft.Apply).
	ApplyTimeout time.Duration

	// TLS, when set, runs the raft transport over mutual TLS. The listener
	// uses a clone of it that always requires and verifies a client
	// certificate; the dialer uses a clone whose ServerName, if empty, is
	// the host part of the address dialled. It must carry this node's
	// certificate (Certificates, or GetCertificate and
	// GetClientCertificate) and must not set InsecureSkipVerify unless its
	// VerifyConnection verifies the peer's chain (mtls.Source.Config does,
	// against a CA bundle it reloads); a GetConfigForClient it sets is
	// wrapped so that the listener's checks still run. Peers
	// must present certificates of role replica (see package mtls) named by
	// their server id: the listener admits only the replicas of the latest
	// configuration (any replica while it is empty), the dialer only peers
	// with a replica certificate.
	TLS *tls.Config

	// Conns bounds the connections the Raft port holds (package
	// internal/connlimit): at most Conns.PerIP from one IP and Conns.Total in
	// all, a handshake (plain TCP: the first bytes) within
	// Conns.FirstByteTimeout. The Raft port keeps its own budget, separate
	// from the gRPC API's. The IPs of the replicas of the latest
	// configuration (the hosts of their Raft addresses; a name is resolved)
	// are exempt from the per-IP limit and have Conns.Reserve places past
	// the total, so that a flood cannot lock peers out; Conns.Name and
	// Conns.Exempt are set by the node. The zero value has no limits.
	Conns connlimit.Limits

	// Revocations, when set with TLS, tracks every connection the Raft
	// port accepts by its peer certificate, so that revoking a replica's
	// certificate closes its connections at once (mtls.Revocations.Set);
	// its refusal at the handshake is TLS's (mtls.Source checks it), and
	// the node logs that the replica should be removed from the
	// membership.
	Revocations *mtls.Revocations

	// Logger receives the node's and raft's logs. Nil means a logger named
	// "raftnode" at Info level writing to stderr.
	Logger hclog.Logger

	// EncodeBatch builds the data of one log entry from a batch of commands,
	// stamping the leader's clock and the serving term. Required. It must
	// not retain cmds.
	EncodeBatch func(now time.Time, term uint64, cmds [][]byte) ([]byte, error)

	// EpochCommand returns the command a new leader commits (alone, as a
	// batch of one) before it serves term. Required.
	EpochCommand func(term uint64) ([]byte, error)

	// FatalResult, when set, classifies what the FSM's Apply returned for a
	// command entry: a non-nil error means this replica cannot apply the
	// entry as the other replicas did (for the work ledger, an error
	// wrapping fsm.ErrCorruptEntry), so it must stop rather than skip the
	// entry and diverge. The node then never calls the FSM again (not Apply,
	// Snapshot, Restore or StoreConfiguration), its applied index stays
	// before that entry, it stops serving and shuts raft down, and it
	// reports an error wrapping ErrFatalApply on Node.Fatal. Nil means no
	// result is fatal. It runs on raft's FSM goroutine and must be quick.
	FatalResult func(resp any) error

	// Observer, when set, is told about the node's work (for metrics; see
	// Observer). Nil observes nothing.
	Observer Observer
}

// Observer receives measurements of a Node's work. Its methods are called
// synchronously on the node's hot paths (ObserveApply on raft's FSM
// goroutine): they must be fast, must not block and must be safe for
// concurrent use. They must not call the Node.
type Observer interface {
	// ObserveApply reports that the FSM applied the command entry at index
	// in took (the time FSM.Apply ran, on this replica).
	ObserveApply(index uint64, took time.Duration)
	// ObserveBatch reports that the leader handed one log entry of commands
	// commands and size bytes (their summed sizes) to raft: the group
	// commit's batch.
	ObserveBatch(commands, size int)
	// ObserveCommit reports how long one batch took from being handed to
	// raft until it was applied (or failed, err != nil) on the leader.
	ObserveCommit(took time.Duration, err error)
}

// DefaultConfig returns a Config tuned for a LAN, such that a dead leader is
// replaced in about half a second: followers notice its silence after a
// randomized 200–400 ms (hashicorp/raft's heartbeat timer runs between
// HeartbeatTimeout and twice that), and a candidate whose first vote is
// refused (the other follower still hears no silence) retries after a
// randomized 200–400 ms. The leader sends heartbeats every
// HeartbeatTimeout/10 (20 ms) from their own goroutines, and followers
// take them on a fast path apart from log writes and fsync, so disk stalls
// and a loaded machine do not cause spurious elections; links with longer
// or less predictable latency should raise all three timeouts (the
// rollout-coord flags). ID, DataDir, RaftAddr, EncodeBatch and EpochCommand
// are left empty and must be set.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotRetain:     2,
		MaxBatchCommands:   512,
		MaxBatchBytes:      8 << 20,
		MaxInflightBatches: 4,
		ApplyTimeout:       5 * time.Second,
		Conns: connlimit.Limits{
			PerIP:            connlimit.DefaultPerIP,
			Total:            DefaultMaxConns,
			Reserve:          DefaultConnsReserve,
			FirstByteTimeout: connlimit.DefaultFirstByteTimeout,
		},
	}
}

// DefaultMaxConns and DefaultConnsReserve are the default total limit of
// the Raft port's connections and the places past it kept for the
// replicas of the configuration (Config.Conns).
const (
	DefaultMaxConns     = 1024
	DefaultConnsReserve = 64
)

// minRaftTimeout is hashicorp/raft's lower bound on its timeouts.
const minRaftTimeout = 5 * time.Millisecond

// Validate reports every field that is out of range in one error that wraps
// ErrInvalidConfig and names each field. It checks hashicorp/raft's own
// constraints too (LeaderLeaseTimeout <= HeartbeatTimeout <=
// ElectionTimeout, lower bounds). A nil Logger and an empty AdvertiseAddr are
// valid (they have defaults).
func (c Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	if c.ID == "" {
		add("ID: must not be empty")
	}
	if c.DataDir == "" {
		add("DataDir: must not be empty")
	}
	if msg := checkAddrs(c.RaftAddr, c.AdvertiseAddr); len(msg) > 0 {
		bad = append(bad, msg...)
	}

	if c.HeartbeatTimeout < minRaftTimeout {
		add("HeartbeatTimeout: %s is below %s", c.HeartbeatTimeout, minRaftTimeout)
	}
	if c.ElectionTimeout < minRaftTimeout {
		add("ElectionTimeout: %s is below %s", c.ElectionTimeout, minRaftTimeout)
	} else if c.ElectionTimeout < c.HeartbeatTimeout {
		add("ElectionTimeout: %s must be >= HeartbeatTimeout (%s)", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout < minRaftTimeout {
		add("LeaderLeaseTimeout: %s is below %s", c.LeaderLeaseTimeout, minRaftTimeout)
	} else if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		add("LeaderLeaseTimeout: %s must be <= HeartbeatTimeout (%s)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.CommitTimeout < time.Millisecond {
		add("CommitTimeout: %s is below 1ms", c.CommitTimeout)
	}
	if c.SnapshotInterval < minRaftTimeout {
		add("SnapshotInterval: %s is below %s", c.SnapshotInterval, minRaftTimeout)
	}
	if c.SnapshotRetain < 1 {
		add("SnapshotRetain: %d must be >= 1", c.SnapshotRetain)
	}
	if c.MaxBatchCommands < 1 {
		add("MaxBatchCommands: %d must be >= 1", c.MaxBatchCommands)
	}
	if c.MaxBatchBytes < 1 {
		add("MaxBatchBytes: %d must be >= 1", c.MaxBatchBytes)
	}
	if c.MaxInflightBatches < 1 {
		add("MaxInflightBatches: %d must be >= 1", c.MaxInflightBatches)
	}
	if c.ApplyTimeout <= 0 {
		add("ApplyTimeout: %s must be > 0", c.ApplyTimeout)
	}
	if c.EncodeBatch == nil {
		add("EncodeBatch: must be set")
	}
	if c.EpochCommand == nil {
		add("EpochCommand: must be set")
	}
	if c.TLS != nil {
		if len(c.TLS.Certificates) == 0 && (c.TLS.GetCertificate == nil || c.TLS.GetClientCertificate == nil) {
			add("TLS: no certificate (set Certificates, or both GetCertificate and GetClientCertificate)")
		}
		if c.TLS.InsecureSkipVerify && c.TLS.VerifyConnection == nil {
			add("TLS: InsecureSkipVerify must be false for mutual TLS (unless VerifyConnection verifies the peer, as mtls.Source's config does)")
		}
	}

	if len(bad) == 0 {
		// Backstop: hashicorp's own validation of what we would hand it.
		if err := raft.ValidateConfig(c.raftConfig()); err != nil {
			add("raft: %v", err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(bad, "; "))
	}
	return nil
}

// checkAddrs validates RaftAddr and AdvertiseAddr and returns one message per
// problem.
func checkAddrs(raftAddr, advertise string) []string {
	var bad []string
	host, _, err := splitHostPort(raftAddr)
	if err != nil {
		return append(bad, fmt.Sprintf("RaftAddr: %v", err))
	}
	if advertise == "" {
		if !specificHost(host) {
			bad = append(bad, fmt.Sprintf("AdvertiseAddr: must be set when RaftAddr %q has no specific host", raftAddr))
		}
		return bad
	}
	ahost, aport, err := splitHostPort(advertise)
	switch {
	case err != nil:
		bad = append(bad, fmt.Sprintf("AdvertiseAddr: %v", err))
	case !specificHost(ahost):
		bad = append(bad, fmt.Sprintf("AdvertiseAddr: %q needs a specific host (not empty, 0.0.0.0 or ::)", advertise))
	case aport == 0:
		bad = append(bad, fmt.Sprintf("AdvertiseAddr: %q needs a non-zero port", advertise))
	}
	return bad
}

// splitHostPort parses host:port with a numeric port in 0..65535.
func splitHostPort(addr string) (string, int, error) {
	if addr == "" {
		return "", 0, fmt.Errorf("must not be empty")
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has an invalid port %q", addr, p)
	}
	return host, port, nil
}

// specificHost reports whether host names one interface (not empty and not
// an unspecified address).
func specificHost(host string) bool {
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return false
	}
	return true
}

// logger returns the configured logger or the default one.
func (c Config) logger() hclog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:   "raftnode",
		Level:  hclog.Info,
		Output: os.Stderr,
	})
}

// raftConfig builds the hashicorp/raft configuration from c.
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.NoLegacyTelemetry = true
	if c.Logger != nil {
		rc.Logger = c.Logger.Named("raft")
	}
	return rc
}
