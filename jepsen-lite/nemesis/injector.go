package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/network"
)

// Cluster is what an Injector acts on; the harness implements it over the
// real processes and the network.
type Cluster interface {
	// Leader returns the replica serving as leader and its term, waiting a
	// little for one during an election.
	Leader(ctx context.Context) (id string, term uint64, err error)
	// WaitNewLeader waits until a replica other than old serves as leader
	// in a term above term.
	WaitNewLeader(ctx context.Context, old string, term uint64) (id string, newTerm uint64, err error)
	// Kill SIGKILLs node and waits for it to exit; Restart starts it again.
	Kill(node string) error
	Restart(node string) error
	// Drain SIGTERMs worker node and waits (bounded) for it to exit after
	// its drain (it gives its unstarted work back and reports what it
	// finished); Restart starts it again.
	Drain(node string) error
	// Pause SIGSTOPs node; Resume SIGCONTs it.
	Pause(node string) error
	Resume(node string) error
	// Cut makes links (and only them) the cut links; Heal restores every
	// link (see network.NetNS.Cut).
	Cut(ctx context.Context, links []network.Link) error
	Heal(ctx context.Context) error
}

// Stores is what an Injector acts on for Store steps: the runs' object
// stores and the S3 server; the harness implements it.
type Stores interface {
	// Fault applies the store fault of step s (s.Fault, choices seeded by
	// s.Pick) and returns what it did and the function that heals it.
	Fault(ctx context.Context, s Step) (StoreDamage, func(context.Context) error, error)
}

// StoreDamage is what one store fault did.
type StoreDamage struct {
	// Nodes name what was hit: "s3" for the server, else the run.
	Nodes []string
	// Object is the key deleted or changed ("" for a server fault); Items
	// are the items whose result the ledger had recorded in it before.
	Object string
	Items  []history.Item
	// Detail says what was done (for the history and the report).
	Detail string
}

// Flooder floods a replica for Flood steps; the harness implements it
// (over package flood).
type Flooder interface {
	// Flood starts flooding replica (the leader) for at most hold and
	// returns the function that stops it (at the heal) and returns the
	// flood's figures.
	Flood(ctx context.Context, replica string, hold time.Duration) (stop func(context.Context) (figures string, err error), err error)
}

// Certifier acts on the cluster's certificates for Certs steps; the harness
// implements it.
type Certifier interface {
	// Cert applies s.Cert (on s.Target where it names a node) and returns
	// what it did and the function that completes it at the heal (nil:
	// nothing to heal; a CA rotation drops the old CA there). For
	// CertRevoke it returns without error only once RevokeCertificate
	// answered OK, so after the revocation committed.
	Cert(ctx context.Context, s Step) (detail string, heal func(context.Context) error, err error)
}

// InjectorConfig configures an Injector.
type InjectorConfig struct {
	// Replicas and Workers name the nodes.
	Replicas, Workers []string
	// History receives a line per fault and heal. Required.
	History *history.Writer
	// FailoverTimeout bounds waiting for a new leader after a leader fault
	// (zero selects 30s).
	FailoverTimeout time.Duration
	// Logger receives progress. Nil discards it.
	Logger hclog.Logger
	// Stores applies Store steps (nil: they fail, not applied).
	Stores Stores
	// Flooder applies Flood steps (nil: they fail, not applied).
	Flooder Flooder
	// Certs applies Certs steps (nil: they fail, not applied).
	Certs Certifier
	// Retired, when set, reports a worker that is gone for good (its
	// certificate revoked: a revoked worker exits): a worker fault planned
	// on it hits the next worker of Workers that is not retired instead.
	Retired func(worker string) bool
}

// Failover is one leader fault and how long the cluster took to serve
// again.
type Failover struct {
	Kind      Kind   `json:"kind"`
	OldLeader string `json:"old_leader"`
	OldTerm   uint64 `json:"old_term"`
	NewLeader string `json:"new_leader,omitempty"`
	NewTerm   uint64 `json:"new_term,omitempty"`
	// At is the fault's time (history clock); Took is the time until a new
	// leader served, zero when none did within the timeout (TimedOut).
	At       int64         `json:"at"`
	Took     time.Duration `json:"took"`
	TimedOut bool          `json:"timed_out,omitempty"`
}

// Applied is one fault the injector made.
type Applied struct {
	Step   Step     `json:"step"`
	Nodes  []string `json:"nodes"`
	At     int64    `json:"at"`
	Healed int64    `json:"healed"`
	Err    string   `json:"err,omitempty"`
	// Object and Detail are a store fault's (StoreDamage).
	Object string `json:"object,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Injector applies faults to a Cluster and remembers what it must heal. It
// is safe for concurrent use.
type Injector struct {
	cfg InjectorConfig
	cl  Cluster
	log hclog.Logger

	mu     sync.Mutex
	cut    bool
	paused map[string]bool
	killed map[string]bool
	// workerKills counts the worker-kill steps applied: every second one
	// drains the worker (SIGTERM) instead of killing it.
	workerKills int
	storeHeal   map[int]func(context.Context) error // store faults, floods and certificate changes in place, by applied index
	failovers   []Failover
	applied     []Applied
	lastHeal    int64
	measures    sync.WaitGroup
}

// DefaultInjectorConfig returns a config with the default failover timeout
// and no nodes or history.
func DefaultInjectorConfig() InjectorConfig { return InjectorConfig{FailoverTimeout: 30 * time.Second} }

// Validate reports the first problem with c.
func (c InjectorConfig) Validate() error {
	switch {
	case c.History == nil:
		return fmt.Errorf("%w: History is required", ErrInvalidConfig)
	case len(c.Replicas) == 0:
		return fmt.Errorf("%w: Replicas is empty", ErrInvalidConfig)
	case c.FailoverTimeout < 0:
		return fmt.Errorf("%w: FailoverTimeout must be >= 0", ErrInvalidConfig)
	}
	return nil
}

// NewInjector returns an Injector acting on cl.
func NewInjector(cfg InjectorConfig, cl Cluster) (*Injector, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: a Cluster is required", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FailoverTimeout == 0 {
		cfg.FailoverTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Injector{cfg: cfg, cl: cl, log: cfg.Logger.Named("nemesis"), paused: map[string]bool{}, killed: map[string]bool{},
		storeHeal: map[int]func(context.Context) error{}}, nil
}

// Run runs steps (up to five tracks side by side, see Plan) from now until the
// last is healed or ctx ends, then heals whatever is still faulted and waits
// for the failover measurements. It returns the errors of faults that
// could not be applied or healed (the run goes on past them).
//
// Where steps keep the floods' quiet windows (as Plan does when the run is
// long enough; see FloodQuietBefore) and have other faults, a flood waits
// (at most FloodGateWait) until no other fault is in place and FloodSettle
// has passed since the last one healed, and no other fault starts while a
// flood waits or holds (each waits at most 2*FloodGateWait+FloodMaxHold,
// then starts anyway): Plan keeps the windows free, and this keeps them
// free when an apply or a heal runs late. Otherwise the tracks run as
// planned, side by side.
func (in *Injector) Run(ctx context.Context, steps []Step) error {
	start := time.Now()
	var tracks [5][]Step
	for _, s := range steps {
		i := s.Kind.track()
		tracks[i] = append(tracks[i], s)
	}
	var gate *floodGate
	if len(tracks[3]) > 0 && len(tracks[0])+len(tracks[1])+len(tracks[2])+len(tracks[4]) > 0 && keepsQuiet(steps) {
		gate = newFloodGate()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for ti, tr := range tracks {
		flood := ti == 3
		wg.Go(func() {
			for _, s := range tr {
				if !sleepUntil(ctx, start.Add(s.At)) {
					return
				}
				if gate != nil {
					if flood {
						if !gate.startFlood(ctx) {
							in.log.Warn("flood starts beside another fault", "step", s.String())
						}
					} else if !gate.startOther(ctx) {
						in.log.Warn("fault starts beside a flood", "step", s.String())
					}
				}
				heal, err := in.Apply(ctx, s)
				if err != nil {
					if gate != nil {
						gate.end(flood, false)
					}
					in.log.Warn("fault not applied", "step", s.String(), "error", err)
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", s, err))
					mu.Unlock()
					continue
				}
				sleepUntil(ctx, time.Now().Add(s.Hold))
				herr := heal(context.WithoutCancel(ctx))
				if gate != nil {
					gate.end(flood, true)
				}
				if herr != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("healing %s: %w", s, herr))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := in.HealAll(context.WithoutCancel(ctx)); err != nil {
		errs = append(errs, err)
	}
	in.measures.Wait()
	return errors.Join(errs...)
}

// keepsQuiet reports whether no step of steps but the floods overlaps a
// flood's quiet window.
func keepsQuiet(steps []Step) bool {
	var floods []Step
	for _, s := range steps {
		if s.Kind.IsFlood() {
			floods = append(floods, s)
		}
	}
	for _, s := range steps {
		if s.Kind.IsFlood() {
			continue
		}
		for _, w := range quietWindows(floods) {
			if s.At < w.to && s.At+s.Hold > w.from {
				return false
			}
		}
	}
	return true
}

// FloodGateWait bounds how long Run holds a flood back for other faults
// to heal; FloodSettle is the time it leaves after their last heal (the
// flood checker leaves out 2 s after another fault's heal).
const (
	FloodGateWait = 20 * time.Second
	FloodSettle   = 2 * time.Second
)

// floodGate keeps floods and the other tracks' faults apart in Run.
type floodGate struct {
	mu       sync.Mutex
	others   int       // other faults being applied or in place
	flooding bool      // a flood waits to start, or holds
	healed   time.Time // when the last other fault healed
	changed  chan struct{}
}

func newFloodGate() *floodGate { return &floodGate{changed: make(chan struct{})} }

// notify wakes the waiters; g.mu is held.
func (g *floodGate) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// await waits until ok (called with g.mu held) returns true, then runs
// then with g.mu still held. It gives up after wait or when ctx ends, and
// says whether ok held; then runs either way.
func (g *floodGate) await(ctx context.Context, wait time.Duration, ok func() bool, then func()) bool {
	deadline := time.Now().Add(wait)
	for {
		g.mu.Lock()
		if ok() || time.Now().After(deadline) || ctx.Err() != nil {
			held := ok()
			then()
			g.mu.Unlock()
			return held
		}
		ch := g.changed
		g.mu.Unlock()
		// ok may turn on with time alone (FloodSettle): look again
		// every 100ms at least.
		tm := time.NewTimer(min(time.Until(deadline), 100*time.Millisecond))
		select {
		case <-ch:
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
	}
}

// startFlood holds the other tracks back, then waits for their faults
// to heal and settle; it reports whether they did in time.
func (g *floodGate) startFlood(ctx context.Context) bool {
	g.mu.Lock()
	g.flooding = true
	g.mu.Unlock()
	return g.await(ctx, FloodGateWait,
		func() bool { return g.others == 0 && time.Since(g.healed) >= FloodSettle },
		func() {})
}

// startOther waits until no flood waits or holds, then counts a fault in
// place; it reports whether the flood ended in time.
func (g *floodGate) startOther(ctx context.Context) bool {
	return g.await(ctx, 2*FloodGateWait+FloodMaxHold,
		func() bool { return !g.flooding },
		func() { g.others++ })
}

// end records that a fault (a flood when flood) healed, or was not
// applied.
func (g *floodGate) end(flood, applied bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case flood:
		g.flooding = false
	default:
		g.others--
		if applied {
			g.healed = time.Now()
		}
	}
	g.notify()
}

// sleepUntil waits until t; it returns false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// Apply injects one fault now and returns the function that heals it.
// Leader-targeted steps resolve the leader first (ErrNoLeader if none
// serves); faults that hit the leader start a failover measurement.
func (in *Injector) Apply(ctx context.Context, s Step) (heal func(context.Context) error, err error) {
	rec := Applied{Step: s, At: history.Now()}
	defer func() {
		if err != nil {
			rec.Err = err.Error()
			in.mu.Lock()
			in.applied = append(in.applied, rec)
			in.mu.Unlock()
		}
	}()
	var leader string
	var term uint64
	if s.Target == Leader || s.Kind == Kill || s.Kind == PartitionLeader || s.Kind == Pause || s.Kind == Flood {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		leader, term, err = in.cl.Leader(lctx)
		cancel()
		if err != nil && s.Target == Leader {
			return nil, fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
	}
	target := s.Target
	if target == Leader {
		target = leader
	}
	if s.Kind == WorkerKill || s.Kind == WorkerPause || s.Kind == ExpiryKill {
		if sub := in.substitute(target); sub != target {
			rec.Detail = fmt.Sprintf("on %s instead of %s (retired: its certificate is revoked)", sub, target)
			target = sub
		}
	}
	var nodes []string
	var undo func(context.Context) error
	var damage StoreDamage
	switch s.Kind {
	case PartitionHalves:
		nodes = append(slices.Clone(s.Sides[0]), s.Sides[1]...)
		err = in.cutNet(ctx, network.Both(s.Sides[0], s.Sides[1]))
		undo = in.healNet
	case PartitionLeader:
		var others []string
		for _, n := range append(slices.Clone(in.cfg.Replicas), in.cfg.Workers...) {
			if n != target {
				others = append(others, n)
			}
		}
		nodes = []string{target}
		err = in.cutNet(ctx, network.Both([]string{target}, others))
		undo = in.healNet
	case PartitionBridge:
		n := len(s.Order)
		nodes = slices.Clone(s.Order)
		err = in.cutNet(ctx, network.Both(s.Order[:n/2], s.Order[n/2+1:]))
		undo = in.healNet
	case PartitionRing:
		var links []network.Link
		n := len(s.Order)
		for i := range s.Order {
			links = append(links, network.Link{From: s.Order[(i+n-1)%n], To: s.Order[i]})
		}
		nodes = slices.Clone(s.Order)
		err = in.cutNet(ctx, links)
		undo = in.healNet
	case Kill, WorkerKill:
		nodes = []string{target}
		if s.Kind == WorkerKill && in.nextWorkerKillDrains() {
			damage.Detail = "drained (SIGTERM: the worker gives its unstarted work back and reports what it finished), then restarted"
			rec.Detail = damage.Detail
			err = in.drain(target)
		} else {
			err = in.kill(target)
		}
		undo = func(context.Context) error { return in.restart(target) }
	case Pause, WorkerPause:
		nodes = []string{target}
		err = in.pause(target)
		undo = func(context.Context) error { return in.resume(target) }
	case ExpiryKill:
		nodes = []string{target}
		if err = in.pause(target); err != nil {
			break
		}
		tm := time.NewTimer(s.Delay)
		select {
		case <-ctx.Done():
			tm.Stop()
			_ = in.resume(target)
			return nil, ctx.Err()
		case <-tm.C:
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		leader, term, err = in.cl.Leader(lctx)
		cancel()
		if err != nil {
			_ = in.resume(target)
			return nil, fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		if err = in.kill(leader); err != nil {
			_ = in.resume(target)
			break
		}
		nodes = append(nodes, leader)
		rec.Detail = fmt.Sprintf("worker %s paused, leader %s killed %v later", target, leader, s.Delay)
		damage.Detail = rec.Detail
		killed := leader
		undo = func(context.Context) error {
			return errors.Join(in.restart(killed), in.resume(target))
		}
	case Store:
		if in.cfg.Stores == nil {
			return nil, fmt.Errorf("%w: no object stores to fault", ErrInvalidConfig)
		}
		damage, undo, err = in.cfg.Stores.Fault(ctx, s)
		nodes = damage.Nodes
		rec.Object, rec.Detail = damage.Object, damage.Detail
	case Flood:
		if in.cfg.Flooder == nil {
			return nil, fmt.Errorf("%w: no flooder", ErrInvalidConfig)
		}
		if target == "" {
			return nil, fmt.Errorf("%w: no replica to flood", ErrNoLeader)
		}
		nodes = []string{target}
		var stop func(context.Context) (string, error)
		stop, err = in.cfg.Flooder.Flood(ctx, target, s.Hold)
		undo = func(hctx context.Context) error {
			figures, ferr := stop(hctx)
			in.mu.Lock()
			for i := range in.applied {
				if in.applied[i].At == rec.At && in.applied[i].Step.Kind == Flood {
					in.applied[i].Detail = figures
				}
			}
			in.mu.Unlock()
			if figures != "" {
				in.cfg.History.Write(history.Event{Type: history.TypeInfo, Op: "flood", Nodes: nodes, Detail: figures})
			}
			return ferr
		}
	case Certs:
		if in.cfg.Certs == nil {
			return nil, fmt.Errorf("%w: no certificates to act on", ErrInvalidConfig)
		}
		nodes = []string{s.Target}
		if s.Target == "" {
			nodes = append(slices.Clone(in.cfg.Replicas), in.cfg.Workers...)
		}
		damage.Detail, undo, err = in.cfg.Certs.Cert(ctx, s)
		if undo == nil {
			undo = func(context.Context) error { return nil }
		}
		rec.Detail = damage.Detail
		if err == nil && s.Cert == CertRevoke {
			// After the answer: the revocation is committed by now.
			in.cfg.History.Write(history.Event{Type: history.TypeNemesis, Op: RevokeOp, Nodes: []string{s.Target},
				Detail: "committed: " + damage.Detail})
		}
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownKind, s.Kind)
	}
	if err != nil {
		return nil, err
	}
	rec.Nodes = nodes
	detail := "start: " + s.String()
	if damage.Detail != "" {
		detail += ": " + damage.Detail
	}
	in.cfg.History.Write(history.Event{Time: rec.At, Type: history.TypeNemesis, Op: string(s.Kind), Detail: detail, Nodes: nodes, Term: term,
		Object: damage.Object, Items: damage.Items})
	in.log.Info("fault", "step", s.String(), "nodes", nodes)
	if leader != "" && slices.Contains(nodes, leader) && (s.Kind == Kill || s.Kind == Pause || s.Kind == PartitionLeader || s.Kind == ExpiryKill) {
		in.measure(ctx, s.Kind, leader, term, rec.At)
	}
	in.mu.Lock()
	idx := len(in.applied)
	in.applied = append(in.applied, rec)
	if s.Kind == Store || s.Kind == Flood || s.Kind == Certs {
		in.storeHeal[idx] = undo
	}
	in.mu.Unlock()
	return func(hctx context.Context) error {
		herr := undo(hctx)
		in.mu.Lock()
		delete(in.storeHeal, idx)
		in.mu.Unlock()
		now := history.Now()
		in.mu.Lock()
		in.applied[idx].Healed = now
		in.lastHeal = max(in.lastHeal, now)
		if herr != nil {
			in.applied[idx].Err = "heal: " + herr.Error()
		}
		in.mu.Unlock()
		in.cfg.History.Write(history.Event{Time: now, Type: history.TypeNemesis, Op: string(s.Kind), Detail: "heal", Nodes: nodes})
		in.log.Info("healed", "kind", s.Kind, "nodes", nodes)
		return herr
	}, nil
}

// measure waits in the background for a new leader after a fault on the
// leader at the history time at.
func (in *Injector) measure(ctx context.Context, k Kind, old string, term uint64, at int64) {
	in.measures.Go(func() {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.FailoverTimeout)
		defer cancel()
		f := Failover{Kind: k, OldLeader: old, OldTerm: term, At: at}
		id, nt, err := in.cl.WaitNewLeader(mctx, old, term)
		if err != nil {
			f.TimedOut = true
		} else {
			f.NewLeader, f.NewTerm, f.Took = id, nt, time.Duration(history.Now()-at)
		}
		in.mu.Lock()
		in.failovers = append(in.failovers, f)
		in.mu.Unlock()
		detail := fmt.Sprintf("%s of leader %s (term %d): new leader %s term %d after %v", k, old, term, id, nt, f.Took.Round(time.Millisecond))
		if f.TimedOut {
			detail = fmt.Sprintf("%s of leader %s (term %d): no new leader within %v", k, old, term, in.cfg.FailoverTimeout)
		}
		in.cfg.History.Write(history.Event{Type: history.TypeInfo, Op: "failover", Term: nt, Detail: detail})
	})
}

func (in *Injector) cutNet(ctx context.Context, links []network.Link) error {
	if err := in.cl.Cut(ctx, links); err != nil {
		return err
	}
	in.mu.Lock()
	in.cut = true
	in.mu.Unlock()
	return nil
}

func (in *Injector) healNet(ctx context.Context) error {
	if err := in.cl.Heal(ctx); err != nil {
		return err
	}
	in.mu.Lock()
	in.cut = false
	in.mu.Unlock()
	return nil
}

func (in *Injector) kill(node string) error {
	if err := in.cl.Kill(node); err != nil {
		return err
	}
	in.mu.Lock()
	in.killed[node] = true
	in.mu.Unlock()
	return nil
}

// nextWorkerKillDrains counts a worker-kill step and reports whether it
// drains the worker: every second one does (deterministic for a plan).
func (in *Injector) nextWorkerKillDrains() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.workerKills++
	return in.workerKills%2 == 0
}

// drain drains worker node (Cluster.Drain); restart starts it again.
func (in *Injector) drain(node string) error {
	if err := in.cl.Drain(node); err != nil {
		return err
	}
	in.mu.Lock()
	in.killed[node] = true
	in.mu.Unlock()
	return nil
}

func (in *Injector) restart(node string) error {
	in.mu.Lock()
	was := in.killed[node]
	in.mu.Unlock()
	if !was {
		return nil
	}
	if err := in.cl.Restart(node); err != nil {
		return err
	}
	in.mu.Lock()
	delete(in.killed, node)
	in.mu.Unlock()
	return nil
}

func (in *Injector) pause(node string) error {
	if err := in.cl.Pause(node); err != nil {
		return err
	}
	in.mu.Lock()
	in.paused[node] = true
	in.mu.Unlock()
	return nil
}

func (in *Injector) resume(node string) error {
	in.mu.Lock()
	was := in.paused[node]
	in.mu.Unlock()
	if !was {
		return nil
	}
	if err := in.cl.Resume(node); err != nil {
		return err
	}
	in.mu.Lock()
	delete(in.paused, node)
	in.mu.Unlock()
	return nil
}

// HealAll heals every fault still in place: the network, paused and killed
// processes, store faults, floods, a CA rotation under way. It records the time as the last heal.
func (in *Injector) HealAll(ctx context.Context) error {
	in.mu.Lock()
	paused := mapKeys(in.paused)
	killed := mapKeys(in.killed)
	var stores []func(context.Context) error
	for idx, h := range in.storeHeal {
		stores = append(stores, h)
		delete(in.storeHeal, idx)
	}
	in.mu.Unlock()
	var errs []error
	for _, h := range stores {
		if err := h(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := in.healNet(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, n := range paused {
		if err := in.resume(n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range killed {
		if err := in.restart(n); err != nil {
			errs = append(errs, err)
		}
	}
	now := history.Now()
	in.mu.Lock()
	in.lastHeal = max(in.lastHeal, now)
	in.mu.Unlock()
	in.cfg.History.Write(history.Event{Time: now, Type: history.TypeNemesis, Op: "heal-all", Detail: "heal"})
	return errors.Join(errs...)
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Failovers returns the failover measurements so far.
func (in *Injector) Failovers() []Failover {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.failovers)
}

// Applied returns the faults applied (and attempted) so far.
func (in *Injector) Applied() []Applied {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.applied)
}

// LastHeal returns the history time of the last heal (0 if none).
func (in *Injector) LastHeal() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lastHeal
}

// WaitMeasurements waits for the failover measurements under way.
func (in *Injector) WaitMeasurements() { in.measures.Wait() }

// substitute returns worker, or, when Retired says it is gone for good,
// the next worker of Workers (in order, wrapping) that is not; worker
// itself when every one is.
func (in *Injector) substitute(worker string) string {
	if in.cfg.Retired == nil || !in.cfg.Retired(worker) {
		return worker
	}
	ws := in.cfg.Workers
	i := slices.Index(ws, worker)
	for k := 1; k <= len(ws); k++ {
		if w := ws[(i+k+len(ws))%len(ws)]; !in.cfg.Retired(w) {
			return w
		}
	}
	return worker
}
