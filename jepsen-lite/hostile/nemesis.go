package hostile

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// Replica is one replica the attacks aim at.
type Replica struct {
	ID       string
	GRPCAddr string
	RaftAddr string
}

// Config configures a Nemesis.
type Config struct {
	// Seed decides the choices of every attack (victims, forgers, targets).
	Seed int64
	// Replicas are the cluster's replicas, all of them members.
	Replicas []Replica
	// Workers are the workload's (registered) workers, at least two: one
	// forges for another's items.
	Workers []string
	// Runs are the workload's runs; hostile items go into them.
	Runs []string
	// Ghost is a worker identity with a certificate that never registers.
	Ghost string
	// Client and Admin are the client and admin identities (defaults "cli"
	// and "admin"); the client reads, the admin only undoes an accepted
	// membership change.
	Client, Admin string
	// TLS returns the mutual-TLS client configuration of an identity.
	// Required: the attacks need the cluster's certificates.
	TLS func(identity string) (*tls.Config, error)
	// Impostor returns the certificate (and whose it is, as "name (role)")
	// the ImpostorCoordinator attack's server presents: one of the
	// cluster's CA that is not a replica's, ideally valid for server use
	// and the loopback address (as an insider's certificate issued before
	// roles decided usages is). Nil: the Ghost's certificate.
	Impostor func() (tls.Certificate, string, error)
	// History receives one TypeHostile event per attack. Required.
	History *history.Writer
	// Window bounds how long one attack retries while the cluster cannot
	// answer conclusively (default 8s).
	Window time.Duration
	// Logger receives progress. Nil discards it.
	Logger hclog.Logger
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case len(c.Replicas) == 0:
		return fmt.Errorf("%w: Replicas is empty", ErrInvalidConfig)
	case len(c.Workers) < 2:
		return fmt.Errorf("%w: the hostile nemesis needs at least 2 workers, got %d", ErrInvalidConfig, len(c.Workers))
	case len(c.Runs) == 0:
		return fmt.Errorf("%w: Runs is empty", ErrInvalidConfig)
	case c.Ghost == "" || slices.Contains(c.Workers, c.Ghost):
		return fmt.Errorf("%w: Ghost must name an identity that is no workload worker", ErrInvalidConfig)
	case c.TLS == nil:
		return fmt.Errorf("%w: TLS is required (the hostile nemesis needs a TLS cluster)", ErrInvalidConfig)
	case c.History == nil:
		return fmt.Errorf("%w: History is required", ErrInvalidConfig)
	case c.Window < 0:
		return fmt.Errorf("%w: Window must be >= 0", ErrInvalidConfig)
	}
	return nil
}

// Nemesis runs attacks against a cluster. Run it from one goroutine.
type Nemesis struct {
	cfg Config
	log hclog.Logger
	rng *rand.Rand
	ids []string // replica ids, sorted

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by identity + " " + address; identity "" is plaintext
	seq   int
	count int
	// variants counts the runs of each attack that cycles through
	// variants (RangeSubmitMalformed, RangeReportMalformed).
	variants map[Attack]int
}

// New returns a Nemesis for cfg.
func New(cfg Config) (*Nemesis, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		cfg.Window = 8 * time.Second
	}
	if cfg.Client == "" {
		cfg.Client = "cli"
	}
	if cfg.Admin == "" {
		cfg.Admin = "admin"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	n := &Nemesis{cfg: cfg, log: cfg.Logger.Named("hostile"), rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x686f7374)), conns: map[string]*grpc.ClientConn{},
		variants: map[Attack]int{}}
	for _, r := range cfg.Replicas {
		n.ids = append(n.ids, r.ID)
	}
	slices.Sort(n.ids)
	return n, nil
}

// Close closes the connections.
func (n *Nemesis) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, c := range n.conns {
		_ = c.Close()
		delete(n.conns, k)
	}
	return nil
}

// Count returns how many attacks were recorded.
func (n *Nemesis) Count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.count
}

// Run runs steps from now: each attack at its time (or at once when the
// previous one ran late), until the last is done or ctx ends.
func (n *Nemesis) Run(ctx context.Context, steps []Step) {
	start := time.Now()
	for _, s := range steps {
		if !sleepUntil(ctx, start.Add(s.At)) {
			return
		}
		n.Attack(ctx, s.Attack)
	}
}

// Attack runs one attack now and records it.
func (n *Nemesis) Attack(ctx context.Context, a Attack) {
	ev := history.Event{Type: history.TypeHostile, Op: string(a), Expect: Expect(a)}
	var r result
	switch a {
	case ForgeReportOwner, ForgeReportCAS, ForgeReportClient, ForeignDeregister, PlaintextGRPC:
		r = n.forge(ctx, a)
	case JoinWorker, JoinClient, RemoveWorker, RemoveClient:
		r = n.membership(ctx, a)
	case PlaintextRaft, WorkerRaft:
		r = n.raft(ctx, a)
	case OversizeItems, OversizePayload, OversizeRequest, OversizeMessage, ShortID, NonJSON, EmptySubmit:
		r = n.submit(ctx, a)
	case UnregisteredClaim, UnregisteredHeartbeat:
		r = n.unregistered(ctx, a)
	case RangeSubmitMalformed, RangeSubmitWorker:
		r = n.rangeSubmit(ctx, a)
	case RangeReportOwner, RangeReportClient, RangeReportCAS, RangeReportMalformed, RangeReportManyFailed, RangeReportGoneRun:
		r = n.rangeReport(ctx, a)
	case ImpostorCoordinator:
		r = n.impostor(ctx)
	default:
		r = result{got: Inconclusive, detail: "unknown attack"}
	}
	if ctx.Err() != nil && r.got == Inconclusive {
		return // the run is over: nothing was learned
	}
	ev.Got, ev.Detail, ev.Changed, ev.Worker, ev.Items = r.got, r.detail, r.changed, r.as, r.items
	if r.expect != "" {
		ev.Expect = r.expect
	}
	if r.target != "" {
		ev.Nodes = []string{r.target}
	}
	n.cfg.History.Write(ev)
	n.mu.Lock()
	n.count++
	n.mu.Unlock()
	lvl := hclog.Debug
	if !Expected(ev.Expect, ev.Got) && ev.Got != Inconclusive || ev.Changed != "" {
		lvl = hclog.Warn
	}
	n.log.Log(lvl, "attack", "attack", a, "expect", ev.Expect, "got", ev.Got, "changed", ev.Changed, "detail", ev.Detail)
}

// result is what an attack saw.
type result struct {
	got, detail, changed string
	// expect, when set, replaces Expect(attack) (a request that turned
	// out larger than the message limit).
	expect string
	target string // replica
	as     string // identity used
	items  []history.Item
}

// describe puts what the attack did before what it saw.
func (r *result) describe(format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	if r.detail != "" {
		what += ": " + r.detail
	}
	r.detail = what
}

// conn returns the cached connection of identity ("" for plaintext) to addr.
func (n *Nemesis) conn(identity, addr string) (rolloutv1.CoordinatorClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := identity + " " + addr
	if c, ok := n.conns[k]; ok {
		return rolloutv1.NewCoordinatorClient(c), nil
	}
	creds := insecure.NewCredentials()
	if identity != "" {
		t, err := n.cfg.TLS(identity)
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, fmt.Errorf("%w: no TLS configuration for %q", ErrInvalidConfig, identity)
		}
		creds = credentials.NewTLS(t)
	}
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	n.conns[k] = c
	return rolloutv1.NewCoordinatorClient(c), nil
}

// cluster asks replica r for its view with the client identity.
func (n *Nemesis) cluster(ctx context.Context, r Replica) (*rolloutv1.ClusterResponse, error) {
	c, err := n.conn(n.cfg.Client, r.GRPCAddr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Cluster(cctx, &rolloutv1.ClusterRequest{})
}

// leader asks every replica at once and returns the leader with the
// highest term (coordclient.Leader) and its view.
func (n *Nemesis) leader(ctx context.Context) (Replica, *rolloutv1.ClusterResponse, error) {
	views := make([]*rolloutv1.ClusterResponse, len(n.cfg.Replicas))
	var wg sync.WaitGroup
	for i, r := range n.cfg.Replicas {
		wg.Go(func() {
			if v, err := n.cluster(ctx, r); err == nil {
				views[i] = v
			}
		})
	}
	wg.Wait()
	best := coordclient.Leader(views)
	if best < 0 {
		return Replica{}, nil, ErrNoLeader
	}
	return n.cfg.Replicas[best], views[best], nil
}

// up reports whether r answers Cluster over TLS (it is running and not
// paused).
func (n *Nemesis) up(ctx context.Context, r Replica) bool {
	_, err := n.cluster(ctx, r)
	return err == nil
}

// serving reports whether r serves a linearizable read as leader now.
func (n *Nemesis) serving(ctx context.Context, r Replica) bool {
	c, err := n.conn(n.cfg.Client, r.GRPCAddr)
	if err != nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: n.cfg.Runs[0]})
	return err == nil
}

// confirm says how an Unavailable answer from r is confirmed as the
// answer to the request itself rather than to the cluster's state.
type confirm int

const (
	// transient: an Unavailable answer is never conclusive (retry).
	transient confirm = iota
	// whenUp: conclusive when r answers Cluster over TLS right after.
	whenUp
	// whenServing: conclusive when r serves a linearizable read right
	// after (it was the leader: the refusal was not about leadership).
	whenServing
)

// retry calls call against the leader until it gives a conclusive outcome
// or the window ends. Unavailable answers are conclusive as cf says;
// DeadlineExceeded and Canceled never are; any other code or success is.
// call returns the outcome of a success.
func (n *Nemesis) retry(ctx context.Context, cf confirm, call func(context.Context, Replica) (string, error)) result {
	return n.retryFor(ctx, cf, callTimeout, call)
}

// callTimeout bounds one call of an attack.
const callTimeout = 4 * time.Second

// retryFor is retry with each call bounded by timeout (a request of
// megabytes takes longer to send and decode).
func (n *Nemesis) retryFor(ctx context.Context, cf confirm, timeout time.Duration, call func(context.Context, Replica) (string, error)) result {
	deadline := time.Now().Add(n.cfg.Window)
	last := ""
	for {
		r, _, err := n.leader(ctx)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			got, err := call(cctx, r)
			cancel()
			if err == nil {
				return result{got: got, target: r.ID}
			}
			if rev, ok := rolloutv1.RevokedOf(err); ok {
				// The attacker's certificate was revoked (by the certs
				// nemesis): refused before any handler, told why; the edge
				// the attack aims at was not reached, so it proves nothing.
				return result{got: Inconclusive, detail: r.ID + ": the attacking certificate is revoked (" + rev.String() + ")", target: r.ID}
			}
			st := status.Convert(err)
			conclusive := false
			switch st.Code() {
			case codes.Unavailable:
				conclusive = cf == whenUp && n.up(ctx, r) || cf == whenServing && n.serving(ctx, r)
			case codes.DeadlineExceeded, codes.Canceled:
			default:
				conclusive = true
			}
			if conclusive {
				return result{got: st.Code().String(), detail: r.ID + ": " + st.Message(), target: r.ID}
			}
			last = r.ID + ": " + st.Code().String() + ": " + st.Message()
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 300*time.Millisecond) {
			return result{got: Inconclusive, detail: "no conclusive answer within " + n.cfg.Window.String() + ": " + last}
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool { return workload.Sleep(ctx, time.Until(t)) }

// pick returns a seeded choice from s.
func (n *Nemesis) pick(s []string) string { return s[n.rng.IntN(len(s))] }

// others returns the workers other than w.
func (n *Nemesis) others(w string) []string {
	var out []string
	for _, x := range n.cfg.Workers {
		if x != w {
			out = append(out, x)
		}
	}
	return out
}

// next returns a fresh sequence number (unique forged results, join ids).
func (n *Nemesis) next() int {
	n.seq++
	return n.seq
}

// describe lists members by id.
func memberIDs(ms []*rolloutv1.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GetId())
	}
	slices.Sort(out)
	return out
}

func shortStatus(s rolloutv1.ReportStatus) string {
	return strings.TrimPrefix(s.String(), "REPORT_STATUS_")
}
