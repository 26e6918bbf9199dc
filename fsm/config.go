package fsm

import (
	"fmt"
	"time"

	"github.com/rollout/rollout/internal/limits"
)

// Limits on command fields. A command that exceeds one of them is refused
// with ErrInvalidCommand and changes nothing. The limits that clients share
// (names, ids, reasons, models, kinds, dependencies, references, the default
// payload size) are defined in internal/limits; these are the ledger's own.
const (
	// MaxAddrBytes bounds a member's Raft or gRPC address.
	MaxAddrBytes = 256
	// MaxClaimBatch caps ClaimCmd.max; a larger max is treated as this.
	MaxClaimBatch = 1024
)

// Config tunes a Ledger. Every replica of a cluster must use the same Config:
// its values decide outcomes of Apply.
type Config struct {
	// DefaultMaxFailures is the number of failed attempts that make an item
	// Dead when its run's spec says max_failures = 0.
	DefaultMaxFailures uint32

	// MaxStealBatch caps how many items one Steal moves.
	MaxStealBatch int

	// MaxPayloadBytes caps each item's payload, each result and a run
	// spec's sampling bytes.
	MaxPayloadBytes int

	// LostWorkerRetention is how long, in multiples of an ExpireWorkers
	// command's timeout, a worker stays in the ledger after its last
	// heartbeat once it is Lost and holds nothing: an ExpireWorkers command
	// removes a Lost worker silent for longer than LostWorkerRetention ×
	// timeout_nano, so that dead worker ids do not accumulate. A removed
	// worker must Register again.
	LostWorkerRetention uint32

	// EventHistory bounds the event history (see Ledger.Events): once it
	// holds this many events, recording one drops the oldest. Event seqs
	// never restart. A Restore keeps the newest EventHistory events of the
	// snapshot.
	EventHistory int

	// UsageHalfLife is the half-life of a tenant's decayed usage (the items
	// claims gave it; tenants.go): 0 means DefaultUsageHalfLife. The decay
	// is computed from the leader-stamped entry times only.
	UsageHalfLife time.Duration
}

// DefaultUsageHalfLife is Config.UsageHalfLife's default: an hour ago's
// items count half.
const DefaultUsageHalfLife = time.Hour

// halfLife returns the configured half-life in nanoseconds.
func (c Config) halfLife() int64 {
	if c.UsageHalfLife == 0 {
		return int64(DefaultUsageHalfLife)
	}
	return int64(c.UsageHalfLife)
}

// DefaultLostWorkerRetention is Config.LostWorkerRetention's default: a
// worker silent for six failure timeouts (a minute with the coordinator's
// default 10s) is forgotten once it is Lost.
const DefaultLostWorkerRetention = 6

// maxLostWorkerRetention bounds Config.LostWorkerRetention.
const maxLostWorkerRetention = 1000

// DefaultConfig returns the configuration rollout runs with: 3 failures make
// an item Dead, a steal moves at most 32 items, payloads and results are at
// most 1 MiB, a Lost worker is removed after DefaultLostWorkerRetention
// failure timeouts of silence, and the event history keeps the newest
// DefaultEventHistory events.
func DefaultConfig() Config {
	return Config{
		DefaultMaxFailures:  3,
		MaxStealBatch:       32,
		MaxPayloadBytes:     limits.DefaultMaxPayloadBytes,
		LostWorkerRetention: DefaultLostWorkerRetention,
		EventHistory:        DefaultEventHistory,
	}
}

// Validate reports the first field out of range, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.DefaultMaxFailures < 1:
		return fmt.Errorf("%w: DefaultMaxFailures is %d, must be at least 1", ErrInvalidConfig, c.DefaultMaxFailures)
	case c.MaxStealBatch < 1 || c.MaxStealBatch > MaxClaimBatch:
		return fmt.Errorf("%w: MaxStealBatch is %d, must be in [1, %d]", ErrInvalidConfig, c.MaxStealBatch, MaxClaimBatch)
	case c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > 64<<20:
		return fmt.Errorf("%w: MaxPayloadBytes is %d, must be in [1, %d]", ErrInvalidConfig, c.MaxPayloadBytes, 64<<20)
	case c.LostWorkerRetention < 1 || c.LostWorkerRetention > maxLostWorkerRetention:
		return fmt.Errorf("%w: LostWorkerRetention is %d, must be in [1, %d]", ErrInvalidConfig, c.LostWorkerRetention, maxLostWorkerRetention)
	case c.EventHistory < 1 || c.EventHistory > MaxEventHistory:
		return fmt.Errorf("%w: EventHistory is %d, must be in [1, %d]", ErrInvalidConfig, c.EventHistory, MaxEventHistory)
	case c.UsageHalfLife != 0 && (c.UsageHalfLife < time.Second || c.UsageHalfLife > 365*24*time.Hour):
		return fmt.Errorf("%w: UsageHalfLife is %s, must be 0 (the default, %s) or in [1s, 8760h]", ErrInvalidConfig, c.UsageHalfLife, DefaultUsageHalfLife)
	}
	return nil
}
