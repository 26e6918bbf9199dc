package nemesis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

var (
	// ErrUnknownKind is returned by ParseKinds for a name that is no
	// nemesis.
	ErrUnknownKind = errors.New("nemesis: unknown nemesis")
	// ErrInvalidConfig names a bad PlanConfig field.
	ErrInvalidConfig = errors.New("nemesis: invalid config")
	// ErrNoLeader means a leader-targeted fault found no leader to hit.
	ErrNoLeader = errors.New("nemesis: no leader to target")
)

// Kind names a nemesis.
type Kind string

// The nemeses.
const (
	// PartitionHalves cuts the cluster into two random halves (a minority
	// and a majority of replicas, workers spread over both).
	PartitionHalves Kind = "partition-halves"
	// PartitionLeader isolates the current leader from every other node.
	PartitionLeader Kind = "partition-leader"
	// PartitionBridge splits the replicas into two halves that cannot talk
	// and one bridge replica that talks to both.
	PartitionBridge Kind = "partition-bridge"
	// PartitionRing drops packets one way around a ring of replicas, so
	// each hears from a majority but no two from the same one.
	PartitionRing Kind = "partition-ring"
	// Kill SIGKILLs a replica (the leader most often) and restarts it
	// from its data directory.
	Kill Kind = "kill"
	// Pause SIGSTOPs the leader past the election timeout, then SIGCONTs it.
	Pause Kind = "pause"
	// WorkerKill SIGKILLs a worker and restarts it; every second one
	// drains it instead (SIGTERM: its unstarted work is given back, what
	// it finished reported, e.g. a range's release_from and nack_rest).
	WorkerKill Kind = "worker-kill"
	// WorkerPause SIGSTOPs a worker past the coordinator's failure timeout,
	// so its items are re-pended, then SIGCONTs it: its late reports must
	// be refused.
	WorkerPause Kind = "worker-pause"
	// ExpiryKill SIGSTOPs a worker and, about when the leader's failure
	// timeout runs out on it (Step.Delay after the pause: its expiry is
	// being decided and committed), SIGKILLs the leader; the heal
	// restarts the leader and SIGCONTs the worker. Liveness is
	// leader-local: the new leader must give every worker a full grace
	// period, expire the silent one from its own timers, and the worker's
	// late reports must be refused.
	ExpiryKill Kind = "expiry-kill"
	// Store faults the runs' object stores (the store track): each step
	// is one of StoreFaults, in a seeded cycle — the S3 server killed and
	// restarted, paused, or slowed by SIGSTOP/SIGCONT bursts; an object a
	// recorded result lives in deleted or flipped for good; an input chunk
	// that items still need deleted or flipped until the heal restores it.
	Store Kind = "store"
	// Flood floods the leader from an unauthenticated host (connections
	// held on every port, then a slowloris of TLS ClientHellos sent a byte
	// a second) and then with a client certificate (thousands of
	// concurrent calls over a few connections); see package flood. It has
	// a track of its own: a short flood every flood period, in a window
	// that the other tracks keep free (see Plan).
	Flood Kind = "flood"
	// Hostile attacks the cluster as a hostile client would (forged
	// reports, membership calls without authority, plaintext, oversized
	// and malformed requests; see package hostile). It is no fault of this
	// package's plans and not part of "all": name it.
	Hostile Kind = "hostile"
	// Certs acts on the cluster's certificates (the certs track): each
	// step is one of CertFaults, in a seeded cycle — a node's certificate
	// renewed in place (a new key and certificate of the same name and
	// role from the CA, key file first, then SIGHUP), the CA rotated by
	// the documented steps across every process (both CAs in every bundle,
	// new certificates from the new CA; the heal drops the old CA), or
	// one worker's certificate revoked through the admin API (at most once
	// a run, and only with two workers or more, so that others finish the
	// run). A revocation is recorded as a RevokeOp event once the ledger
	// committed it.
	Certs Kind = "certs"
)

// RevokeOp is the Op of the nemesis event that records a committed
// revocation (checker.RevokeOp reads it): written once RevokeCertificate
// answered OK, with the revoked worker in Nodes.
const RevokeOp = "revoke"

// CertFault is what one Certs step does.
type CertFault string

// The certificate faults.
const (
	// CertRenew renews Target's certificate in place.
	CertRenew CertFault = "renew"
	// CertRotateCA rotates the CA of every process; the heal removes the
	// old CA from the bundle.
	CertRotateCA CertFault = "rotate-ca"
	// CertRevoke revokes the certificate of worker Target (by name).
	CertRevoke CertFault = "revoke"
)

// CertFaults returns every certificate fault.
func CertFaults() []CertFault { return []CertFault{CertRenew, CertRotateCA, CertRevoke} }

// AllKinds returns every nemesis.
func AllKinds() []Kind {
	return []Kind{PartitionHalves, PartitionLeader, PartitionBridge, PartitionRing, Kill, Pause, WorkerKill, WorkerPause, ExpiryKill, Store, Flood, Certs}
}

// StoreFault is what one Store step does.
type StoreFault string

// The store faults.
const (
	// StoreKill SIGKILLs the S3 server; the heal starts it again on the
	// same address and data.
	StoreKill StoreFault = "s3-kill"
	// StorePause SIGSTOPs the S3 server until the heal.
	StorePause StoreFault = "s3-pause"
	// StoreSlow SIGSTOPs and SIGCONTs the S3 server in bursts until the
	// heal: every request is slow, none is refused.
	StoreSlow StoreFault = "s3-slow"
	// DeleteResult deletes an object holding results the ledger recorded;
	// FlipResult changes one of its bytes (same size). Neither is healed:
	// the store checker reports those results apart.
	DeleteResult StoreFault = "delete-result"
	FlipResult   StoreFault = "flip-result"
	// DeleteInput deletes an input chunk that unfinished items reference;
	// FlipInput changes one of its bytes. The heal puts the bytes back.
	DeleteInput StoreFault = "delete-input"
	FlipInput   StoreFault = "flip-input"
)

// StoreFaults returns every store fault; ObjectFaults those that need no
// S3 server (they act on any store).
func StoreFaults() []StoreFault {
	return append([]StoreFault{StoreKill, StorePause, StoreSlow}, ObjectFaults()...)
}

// ObjectFaults returns the store faults that act on objects.
func ObjectFaults() []StoreFault {
	return []StoreFault{DeleteResult, FlipResult, DeleteInput, FlipInput}
}

// IsServer reports whether f acts on the S3 server process.
func (f StoreFault) IsServer() bool { return f == StoreKill || f == StorePause || f == StoreSlow }

// PartitionKinds returns the network nemeses.
func PartitionKinds() []Kind {
	return []Kind{PartitionHalves, PartitionLeader, PartitionBridge, PartitionRing}
}

// Known reports whether k is a nemesis: one of AllKinds, or Hostile.
func Known(k Kind) bool { return k == Hostile || slices.Contains(AllKinds(), k) }

// IsWorker reports whether k acts on workers (the worker track) rather than
// on replicas and the network (the cluster track).
func (k Kind) IsWorker() bool { return k == WorkerKill || k == WorkerPause || k == ExpiryKill }

// IsStore reports whether k acts on the object stores (the store track).
func (k Kind) IsStore() bool { return k == Store }

// IsFlood reports whether k floods the leader (the flood track).
func (k Kind) IsFlood() bool { return k == Flood }

// IsCerts reports whether k acts on the certificates (the certs track).
func (k Kind) IsCerts() bool { return k == Certs }

// track returns the index of k's track: 0 cluster, 1 workers, 2 stores,
// 3 floods, 4 certificates.
func (k Kind) track() int {
	switch {
	case k.IsCerts():
		return 4
	case k.IsFlood():
		return 3
	case k.IsWorker():
		return 1
	case k.IsStore():
		return 2
	}
	return 0
}

// IsPartition reports whether k is a network nemesis.
func (k Kind) IsPartition() bool { return slices.Contains(PartitionKinds(), k) }

// ParseKinds parses a comma-separated list of nemeses. Besides the kind
// names it accepts "partition" (every network nemesis), "isolate" (for
// partition-leader), "all" (every fault; not hostile), and "none" (no
// faults). Duplicates are dropped; the result is in AllKinds order, then
// Hostile.
func ParseKinds(s string) ([]Kind, error) {
	set := map[Kind]bool{}
	none := false
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "":
			continue
		case "all":
			for _, k := range AllKinds() {
				set[k] = true
			}
		case "none":
			none = true
		case "partition":
			for _, k := range PartitionKinds() {
				set[k] = true
			}
		case "isolate":
			set[PartitionLeader] = true
		default:
			if !Known(Kind(f)) {
				names := []string{"all", "none", "partition", "isolate"}
				for _, k := range AllKinds() {
					names = append(names, string(k))
				}
				names = append(names, string(Hostile))
				return nil, fmt.Errorf("%w %q (want a comma-separated list of: %s)", ErrUnknownKind, f, strings.Join(names, ", "))
			}
			set[Kind(f)] = true
		}
	}
	if none && len(set) > 0 {
		return nil, fmt.Errorf("%w: \"none\" cannot be combined with other nemeses", ErrUnknownKind)
	}
	var out []Kind
	for _, k := range append(AllKinds(), Hostile) {
		if set[k] {
			out = append(out, k)
		}
	}
	if len(out) == 0 && !none {
		return nil, fmt.Errorf("%w: empty list (use \"none\" for no faults)", ErrUnknownKind)
	}
	return out, nil
}

// Step is one fault of a plan: applied At after the start of the schedule,
// healed Hold later. The random choices are drawn when the plan is made, so
// one seed gives one schedule; "leader" is resolved when the step runs.
type Step struct {
	Kind Kind          `json:"kind"`
	At   time.Duration `json:"at"`
	Hold time.Duration `json:"hold"`
	// Target names the node a kill or pause hits: a replica or worker id,
	// or "leader".
	Target string `json:"target,omitempty"`
	// Sides are the groups of a partition-halves step (replicas and
	// workers), Order the replica order of a bridge or ring.
	Sides [2][]string `json:"sides,omitzero"`
	Order []string    `json:"order,omitempty"`
	// Fault is what a Store step does; Pick seeds its choice of run and
	// object.
	Fault StoreFault `json:"fault,omitempty"`
	Pick  uint64     `json:"pick,omitempty"`
	// Cert is what a Certs step does (its node, if any, in Target).
	Cert CertFault `json:"cert,omitempty"`
	// Delay is, for an ExpiryKill step, how long after pausing its worker
	// the leader is killed.
	Delay time.Duration `json:"delay,omitempty"`
}

// Leader is the Target of leader-targeted steps.
const Leader = "leader"

// String describes the step for logs and reports.
func (s Step) String() string {
	b := fmt.Sprintf("%s at %v for %v", s.Kind, s.At.Round(time.Millisecond), s.Hold.Round(time.Millisecond))
	switch {
	case s.Cert != "":
		b += " " + string(s.Cert)
		if s.Target != "" {
			b += " on " + s.Target
		}
	case s.Fault != "":
		b += " " + string(s.Fault)
	case s.Target != "":
		b += " on " + s.Target
	case len(s.Order) > 0:
		b += " order " + strings.Join(s.Order, ",")
	case len(s.Sides[0]) > 0:
		b += fmt.Sprintf(" %v|%v", s.Sides[0], s.Sides[1])
	}
	return b
}

// PlanConfig configures Plan.
type PlanConfig struct {
	// Seed decides the schedule.
	Seed int64
	// Duration is how long the schedule runs; every fault heals by then.
	Duration time.Duration
	// Kinds are the nemeses to use (each appears at least once when
	// Duration allows).
	Kinds []Kind
	// Replicas and Workers name the nodes.
	Replicas, Workers []string
	// FailureTimeout is the coordinator's --failure-timeout: a worker
	// pause lasts longer.
	FailureTimeout time.Duration
	// Warmup is the quiet time before the first fault (default 3s).
	Warmup time.Duration
	// LeaderBias is the probability that a kill hits the leader (default
	// 0.7).
	LeaderBias float64
	// StoreFaults are the faults a Store step draws from (empty: every
	// one; without an S3 server, ObjectFaults).
	StoreFaults []StoreFault
}

// DefaultPlanConfig returns a config with the defaults and every nemesis.
func DefaultPlanConfig() PlanConfig {
	return PlanConfig{Duration: 60 * time.Second, Kinds: AllKinds(), FailureTimeout: 3 * time.Second, Warmup: 3 * time.Second, LeaderBias: 0.7}
}

// Validate reports the first problem with c.
func (c PlanConfig) Validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("%w: Duration must be > 0", ErrInvalidConfig)
	case len(c.Replicas) == 0:
		return fmt.Errorf("%w: Replicas is empty", ErrInvalidConfig)
	case c.FailureTimeout <= 0:
		return fmt.Errorf("%w: FailureTimeout must be > 0", ErrInvalidConfig)
	case c.Warmup < 0:
		return fmt.Errorf("%w: Warmup must be >= 0", ErrInvalidConfig)
	case c.LeaderBias < 0 || c.LeaderBias > 1:
		return fmt.Errorf("%w: LeaderBias must be in [0, 1]", ErrInvalidConfig)
	}
	for _, k := range c.Kinds {
		if !Known(k) {
			return fmt.Errorf("%w: Kinds: %w %q", ErrInvalidConfig, ErrUnknownKind, k)
		}
		if k.IsWorker() && len(c.Workers) == 0 {
			return fmt.Errorf("%w: nemesis %s needs workers", ErrInvalidConfig, k)
		}
	}
	for _, f := range c.StoreFaults {
		if !slices.Contains(StoreFaults(), f) {
			return fmt.Errorf("%w: StoreFaults: unknown store fault %q", ErrInvalidConfig, f)
		}
	}
	return nil
}

// Slot bounds: a fault and the quiet time after it.
const (
	minSlot = 3500 * time.Millisecond
	maxSlot = 8 * time.Second
)

// Plan returns the schedule for cfg (Hostile, planned by package hostile,
// aside): up to five tracks that run side by side, one of cluster faults
// (partitions, kills, pauses), one of worker faults, one of store
// faults, one of floods (floodTrack) and one of certificate changes
// (certsTrack). Each track cycles through a
// seeded shuffle of its kinds (the store track: of its StoreFaults), so
// every kind comes up before any repeats; a fault is followed by a quiet
// gap. With floods and other faults, the floods are planned first and
// the other tracks keep out of each flood's quiet window (FloodQuietBefore
// before it to FloodQuietAfter after it: a step that would overlap one
// moves to its end), so that each flood runs alone; where that would leave
// fewer kinds and store faults in the schedule (runs too short for the
// tracks to cycle around the windows, such as 30 s) the other tracks are
// planned as without floods, overlapping them. Steps are sorted by At.
func Plan(cfg PlanConfig) ([]Step, error) {
	if cfg.Warmup == 0 {
		cfg.Warmup = DefaultPlanConfig().Warmup
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var cl, wk []Kind
	store, flood, certs := false, false, false
	for _, k := range cfg.Kinds {
		switch {
		case k == Hostile:
			continue // package hostile plans its own schedule
		case k.IsCerts():
			certs = true
		case k.IsFlood():
			flood = true
		case k.IsStore():
			store = true
		case k.IsWorker():
			wk = append(wk, k)
		default:
			cl = append(cl, k)
		}
	}
	var floods []Step
	if flood {
		frng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x666c6f6f64))
		floods = floodTrack(frng, cfg)
	}
	// The other tracks, kept out of quiet (nil: anywhere). Each call
	// starts from the same generators, so a seed gives one schedule.
	others := func(quiet []window) []Step {
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6a657073656e))
		steps := track(rng, cfg, cl, quiet)
		steps = append(steps, track(rng, cfg, wk, quiet)...)
		if store {
			// Its own generator: adding the store track leaves the other
			// tracks' schedules as they were for a seed.
			srng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x73746f7265))
			steps = append(steps, storeTrack(srng, cfg, quiet)...)
		}
		if certs {
			crng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6365727473))
			steps = append(steps, certsTrack(crng, cfg, quiet)...)
		}
		return steps
	}
	steps := others(nil)
	if quiet := quietWindows(floods); len(quiet) > 0 {
		// Keep the floods' quiet windows free of other faults, unless
		// the run is too short for the other tracks to come up with as
		// many of their kinds around them.
		if kept := others(quiet); coverage(kept) >= coverage(steps) {
			steps = kept
		}
	}
	steps = append(steps, floods...)
	slices.SortStableFunc(steps, func(a, b Step) int { return int(a.At - b.At) })
	return steps, nil
}

// The flood track: a flood of FloodMinHold to FloodMaxHold, every
// FloodPeriod or so, the first one FloodPeriod/3 after the warmup (when
// the workload has a rate to compare with). Short floods leave most of
// the run unflooded, so that the flood checker has a throughput to compare
// with.
const (
	FloodMinHold = 5 * time.Second
	FloodMaxHold = 7 * time.Second
	FloodPeriod  = 30 * time.Second
)

// floodTrack plans the flood track's steps, each on the leader.
func floodTrack(rng *rand.Rand, cfg PlanConfig) []Step {
	var out []Step
	at := cfg.Warmup + FloodPeriod/3
	for {
		hold := (FloodMinHold + time.Duration(rng.Int64N(int64(FloodMaxHold-FloodMinHold)))).Round(time.Millisecond)
		if at+hold > cfg.Duration {
			break
		}
		out = append(out, Step{Kind: Flood, At: at, Hold: hold, Target: Leader})
		at += FloodPeriod + time.Duration(rng.Int64N(int64(FloodPeriod/3))) - FloodPeriod/6
		at = at.Round(time.Millisecond)
	}
	return out
}

// FloodQuietBefore and FloodQuietAfter bound a flood's quiet window: in a
// plan with floods and other faults, no other track's fault overlaps
// [At-FloodQuietBefore, At+Hold+FloodQuietAfter) of a flood, so that the
// flood checker measures the flood alone (it leaves out the time under
// another fault and 2 s after its heal) and has unfaulted time beside it
// to compare with. The Injector keeps to it when faults run late.
const (
	FloodQuietBefore = 4 * time.Second
	FloodQuietAfter  = 2 * time.Second
)

// window is a span of the schedule, [from, to).
type window struct{ from, to time.Duration }

// quietWindows returns the floods' quiet windows, in At order.
func quietWindows(floods []Step) []window {
	out := make([]window, 0, len(floods))
	for _, f := range floods {
		out = append(out, window{f.At - FloodQuietBefore, f.At + f.Hold + FloodQuietAfter})
	}
	return out
}

// outside returns the first time from at on where a step of hold
// overlaps none of quiet (sorted, apart): at, or the end of a window.
func outside(at, hold time.Duration, quiet []window) time.Duration {
	for _, w := range quiet {
		if at < w.to && at+hold > w.from {
			at = w.to
		}
	}
	return at
}

// coverage counts the kinds and store faults that steps schedule.
func coverage(steps []Step) int {
	seen := map[string]bool{}
	for _, s := range steps {
		seen[string(s.Kind)+"/"+string(s.Fault)+string(s.Cert)] = true
	}
	return len(seen)
}

// track plans one track's steps, none of them in quiet.
func track(rng *rand.Rand, cfg PlanConfig, kinds []Kind, quiet []window) []Step {
	if len(kinds) == 0 {
		return nil
	}
	span := cfg.Duration - cfg.Warmup
	slot := min(max(span/time.Duration(len(kinds)), minSlot), maxSlot)
	var out []Step
	var cycle []Kind
	at := cfg.Warmup
	for {
		if len(cycle) == 0 {
			cycle = slices.Clone(kinds)
			rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		}
		k := cycle[0]
		hold := time.Duration(float64(slot) * (0.45 + 0.15*rng.Float64()))
		if k == WorkerPause || k == ExpiryKill {
			// Past the failure timeout, so the ledger re-pends its items.
			hold = cfg.FailureTimeout + time.Second + time.Duration(rng.Int64N(int64(time.Second)))
		}
		hold = hold.Round(time.Millisecond)
		gap := max(slot-hold, slot/3).Round(time.Millisecond)
		at = outside(at, hold, quiet)
		if at+hold > cfg.Duration {
			break
		}
		cycle = cycle[1:]
		st := Step{Kind: k, At: at, Hold: hold}
		switch k {
		case PartitionHalves:
			st.Sides = halves(rng, cfg.Replicas, cfg.Workers)
		case PartitionBridge, PartitionRing:
			st.Order = shuffled(rng, cfg.Replicas)
		case PartitionLeader, Pause:
			st.Target = Leader
		case Kill:
			st.Target = Leader
			if rng.Float64() >= cfg.LeaderBias {
				st.Target = cfg.Replicas[rng.IntN(len(cfg.Replicas))]
			}
		case WorkerKill, WorkerPause:
			st.Target = cfg.Workers[rng.IntN(len(cfg.Workers))]
		case ExpiryKill:
			st.Target = cfg.Workers[rng.IntN(len(cfg.Workers))]
			// From just before the failure timeout to just after it and a
			// failure scan: the leader is deciding or committing the expiry.
			st.Delay = (cfg.FailureTimeout - 200*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))).Round(time.Millisecond)
		}
		out = append(out, st)
		at += hold + gap
	}
	return out
}

// storeTrack plans the store track: Store steps, each drawing the next
// fault of a seeded shuffle of cfg.StoreFaults.
func storeTrack(rng *rand.Rand, cfg PlanConfig, quiet []window) []Step {
	faults := cfg.StoreFaults
	if len(faults) == 0 {
		faults = StoreFaults()
	}
	return cycleTrack(rng, cfg, quiet, &faults, func(f StoreFault, at, hold time.Duration) Step {
		return Step{Kind: Store, At: at, Hold: hold, Fault: f, Pick: rng.Uint64()}
	})
}

// certsTrack plans the certs track: Certs steps, each the next fault of a
// seeded shuffle of CertFaults. The revocation comes up once at most, and
// only with two workers or more: its worker (drawn first) is never the
// target of a renewal, and the other workers finish the run.
func certsTrack(rng *rand.Rand, cfg PlanConfig, quiet []window) []Step {
	faults := []CertFault{CertRenew, CertRotateCA}
	revoked := ""
	if len(cfg.Workers) >= 2 {
		faults = append(faults, CertRevoke)
		revoked = cfg.Workers[rng.IntN(len(cfg.Workers))]
	}
	var nodes []string
	for _, n := range append(slices.Clone(cfg.Replicas), cfg.Workers...) {
		if n != revoked {
			nodes = append(nodes, n)
		}
	}
	return cycleTrack(rng, cfg, quiet, &faults, func(f CertFault, at, hold time.Duration) Step {
		st := Step{Kind: Certs, At: at, Hold: hold, Cert: f}
		switch f {
		case CertRenew:
			st.Target = nodes[rng.IntN(len(nodes))]
		case CertRevoke:
			st.Target = revoked
			faults = slices.DeleteFunc(faults, func(f CertFault) bool { return f == CertRevoke })
		}
		return st
	})
}

// cycleTrack lays out a track of faults from the warm-up on: the span is
// cut into slots (span/len(*faults), within minSlot and maxSlot), each
// step holds 45–60% of a slot outside the quiet windows, and its fault is
// the next of a seeded shuffle of *faults, reshuffled when used up. step
// makes the Step of a fault; it may shrink *faults for the cycles after.
func cycleTrack[F any](rng *rand.Rand, cfg PlanConfig, quiet []window, faults *[]F, step func(f F, at, hold time.Duration) Step) []Step {
	span := cfg.Duration - cfg.Warmup
	slot := min(max(span/time.Duration(len(*faults)), minSlot), maxSlot)
	var out []Step
	var cycle []F
	at := cfg.Warmup
	for {
		if len(cycle) == 0 {
			cycle = slices.Clone(*faults)
			rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		}
		hold := time.Duration(float64(slot) * (0.45 + 0.15*rng.Float64())).Round(time.Millisecond)
		gap := max(slot-hold, slot/3).Round(time.Millisecond)
		at = outside(at, hold, quiet)
		if at+hold > cfg.Duration {
			break
		}
		out = append(out, step(cycle[0], at, hold))
		cycle = cycle[1:]
		at += hold + gap
	}
	return out
}

func shuffled(rng *rand.Rand, s []string) []string {
	out := slices.Clone(s)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// halves splits the replicas into a minority and a majority and spreads the
// workers over both at random.
func halves(rng *rand.Rand, replicas, workers []string) [2][]string {
	r := shuffled(rng, replicas)
	k := len(r) / 2
	sides := [2][]string{slices.Clone(r[:k]), slices.Clone(r[k:])}
	for _, w := range workers {
		i := rng.IntN(2)
		sides[i] = append(sides[i], w)
	}
	return sides
}
