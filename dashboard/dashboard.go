package dashboard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

var (
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("dashboard: invalid config")
	// ErrPlaintextAddr is the refusal to serve plain HTTP on an address
	// that is not loopback without insecure.
	ErrPlaintextAddr = errors.New("dashboard: plain HTTP on a non-loopback address")
)

// Reader makes the dashboard's linearizable reads. A coordclient.Client
// (which follows the leader and guards epochs) is one.
type Reader interface {
	RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error)
	Events(ctx context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error)
}

// LocalView returns this replica's own view of the replica set (the
// Cluster RPC answered locally). It may lag; the dashboard says so.
type LocalView func(ctx context.Context) (*rolloutv1.ClusterResponse, error)

// PeerView asks the replica at a gRPC address for its own local view of
// the replica set (the Cluster RPC, one attempt, no leader following).
type PeerView func(ctx context.Context, addr string) (*rolloutv1.ClusterResponse, error)

// LossPoint is one step of a training run: its loss and accuracy.
type LossPoint struct {
	Step     uint64  `json:"step"`
	Loss     float64 `json:"loss"`
	Accuracy float64 `json:"accuracy"`
}

// LossReader returns the per-step loss of a training run (RunSpec.kind
// "train") from its results, in step order.
type LossReader func(ctx context.Context, run string) ([]LossPoint, error)

// Config configures a Dashboard.
type Config struct {
	// Reader makes the linearizable reads (required).
	Reader Reader
	// Local is this replica's view of the replica set (required).
	Local LocalView
	// Peer, when set, asks every other member for its own view at each
	// sample, so that the page shows each replica's role and term as it
	// reports them, and which cannot be reached.
	Peer PeerView
	// PeerTimeout bounds one Peer call (default 1s).
	PeerTimeout time.Duration
	// Loss, when set, reads the loss per step of training runs.
	Loss LossReader
	// Interval is how often Run reads the cluster (default 1s).
	Interval time.Duration
	// ReadTimeout bounds one read (default 3s).
	ReadTimeout time.Duration
	// History is how many throughput samples are kept (default 1800: half
	// an hour at 1s).
	History int
	// Events is how many recent events are kept (default 200).
	Events int
	// RateWindow is the span a run's live rate is measured over (default
	// 10s).
	RateWindow time.Duration
	// LossEvery reads training loss every this many intervals (default 5).
	LossEvery int
	// Logger receives read failures at debug level (default: none).
	Logger hclog.Logger
}

// DefaultConfig returns the defaults (Reader and Local still to be set).
func DefaultConfig() Config {
	return Config{
		Interval:    time.Second,
		ReadTimeout: 3 * time.Second,
		PeerTimeout: time.Second,
		History:     1800,
		Events:      200,
		RateWindow:  10 * time.Second,
		LossEvery:   5,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	switch {
	case c.Reader == nil:
		return fmt.Errorf("%w: Reader is required", ErrInvalidConfig)
	case c.Local == nil:
		return fmt.Errorf("%w: Local is required", ErrInvalidConfig)
	case c.Interval <= 0 || c.ReadTimeout <= 0 || c.RateWindow <= 0 || c.PeerTimeout <= 0:
		return fmt.Errorf("%w: Interval, ReadTimeout, PeerTimeout and RateWindow must be positive", ErrInvalidConfig)
	case c.History < 2 || c.History > 1_000_000:
		return fmt.Errorf("%w: History must be between 2 and 1000000, got %d", ErrInvalidConfig, c.History)
	case c.Events < 1 || c.Events > 10_000:
		return fmt.Errorf("%w: Events must be between 1 and 10000, got %d", ErrInvalidConfig, c.Events)
	case c.LossEvery < 1:
		return fmt.Errorf("%w: LossEvery must be at least 1, got %d", ErrInvalidConfig, c.LossEvery)
	}
	return nil
}

// maxTerms bounds the term history kept.
const maxTerms = 64

// maxLossPoints bounds the loss points kept per training run.
const maxLossPoints = 2000

// Dashboard samples the cluster and serves what it read (Handler). Create
// it with New and run its loop with Run.
type Dashboard struct {
	cfg Config
	log hclog.Logger

	mu sync.Mutex
	// this replica's view
	local    *rolloutv1.ClusterResponse
	localErr string
	// the other members' own views by id (nil view: unreachable, see
	// peerErr)
	peers   map[string]*rolloutv1.ClusterResponse
	peerErr map[string]string
	// the last linearizable RunStatus read and when it was made
	status   *rolloutv1.RunStatusResponse
	statusAt time.Time
	readErr  string
	// throughput history (a ring in a slice, oldest first)
	history []Point
	// recent per-run finished counts, for live rates
	recent []runSample
	// recent events, oldest first; lastSeq is the newest seen
	events      []*rolloutv1.Event
	lastSeq     uint64
	eventsState string // "" ok, else why events are missing
	terms       map[uint64]TermChange
	loss        map[string][]LossPoint
	ticks       int
	// tenants is the last tenant list read (nil: none, or the Reader
	// cannot list tenants); tenantsErr why the last read failed.
	tenants    *rolloutv1.ListTenantsResponse
	tenantsErr string
}

// Point is one throughput sample.
type Point struct {
	// UnixMs is when the sample was taken.
	UnixMs int64 `json:"t"`
	// OK is false when no leader could be read (a gap in the chart).
	OK bool `json:"ok"`
	// Finished is the number of items Done or Dead over all runs.
	Finished uint64 `json:"finished"`
	// Rate is items finished per second since the previous OK sample.
	Rate float64 `json:"rate"`
	// Term and Leader are those of the read.
	Term   uint64 `json:"term"`
	Leader string `json:"leader"`
}

// runSample is the finished count of every run at one time.
type runSample struct {
	at       time.Time
	finished map[string]uint64
}

// TermChange is one entry of the term history: leader led from term on.
type TermChange struct {
	Term   uint64 `json:"term"`
	Leader string `json:"leader"`
	UnixMs int64  `json:"unix_ms"`
	// Source is "event" (a LEADER_ELECTED event of the ledger) or
	// "observed" (a change this dashboard saw in the replies it read).
	Source string `json:"source"`
}

// New returns a Dashboard for cfg.
func New(cfg Config) (*Dashboard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Dashboard{cfg: cfg, log: log, terms: map[uint64]TermChange{}, loss: map[string][]LossPoint{}}, nil
}

// Run samples the cluster every Interval until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.Sample(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads the cluster once (the local view, RunStatus, new events and,
// every LossEvery calls, training loss) and records it as taken at now.
func (d *Dashboard) Sample(ctx context.Context, now time.Time) {
	rctx, cancel := context.WithTimeout(ctx, d.cfg.ReadTimeout)
	defer cancel()
	local, lerr := d.cfg.Local(rctx)
	peers, peerErr := d.readPeers(rctx, local)
	st, serr := d.cfg.Reader.RunStatus(rctx, &rolloutv1.RunStatusRequest{})

	d.mu.Lock()
	d.ticks++
	readLoss := d.cfg.Loss != nil && serr == nil && (d.ticks-1)%d.cfg.LossEvery == 0
	after := d.lastSeq
	d.mu.Unlock()

	var evs *rolloutv1.EventsResponse
	var eerr error
	var tenants *rolloutv1.ListTenantsResponse
	var terr error
	if serr == nil {
		evs, eerr = d.readEvents(rctx, after)
		tenants, terr = d.readTenants(rctx)
	}
	var loss map[string][]LossPoint
	if readLoss {
		loss = d.readLoss(rctx, st)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if lerr != nil {
		d.localErr = lerr.Error()
		d.log.Debug("dashboard: local view", "error", lerr)
	} else {
		d.local, d.localErr = local, ""
		d.peers, d.peerErr = peers, peerErr
	}
	if serr != nil {
		d.readErr = describe(serr)
		d.log.Debug("dashboard: RunStatus", "error", serr)
		d.push(Point{UnixMs: now.UnixMilli()})
		return
	}
	d.status, d.statusAt, d.readErr = st, now, ""
	d.observe(st, now)
	if terr != nil {
		// The runs' tenants still show; the records (weights, quotas)
		// stay as last read.
		d.tenantsErr = describe(terr)
		d.log.Debug("dashboard: ListTenants", "error", terr)
	} else {
		d.tenants, d.tenantsErr = tenants, ""
	}
	switch {
	case eerr != nil:
		d.eventsState = describe(eerr)
	case evs != nil:
		d.addEvents(evs)
		d.eventsState = ""
	}
	for run, pts := range loss {
		d.loss[run] = pts
	}
}

// readPeers asks every other member of local's configuration for its own
// view, all at once, each bounded by PeerTimeout.
func (d *Dashboard) readPeers(ctx context.Context, local *rolloutv1.ClusterResponse) (map[string]*rolloutv1.ClusterResponse, map[string]string) {
	views, errs := map[string]*rolloutv1.ClusterResponse{}, map[string]string{}
	if d.cfg.Peer == nil || local == nil {
		return views, errs
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	self := local.GetHeader().GetReplicaId()
	for _, m := range local.GetMembers() {
		id, addr := m.GetId(), m.GetGrpcAddr()
		if id == self {
			continue
		}
		if addr == "" {
			errs[id] = "its gRPC address is not known yet"
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, d.cfg.PeerTimeout)
			defer cancel()
			v, err := d.cfg.Peer(pctx, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = describe(err)
				return
			}
			views[id] = v
		})
	}
	wg.Wait()
	return views, errs
}

// readEvents reads the events after seq; on the first read (seq 0) only
// the newest Config.Events of the history.
func (d *Dashboard) readEvents(ctx context.Context, after uint64) (*rolloutv1.EventsResponse, error) {
	limit := uint32(d.cfg.Events)
	if after == 0 {
		head, err := d.cfg.Reader.Events(ctx, &rolloutv1.EventsRequest{Limit: 1})
		if err != nil {
			return nil, err
		}
		if last := head.GetLastSeq(); last > uint64(limit) {
			after = last - uint64(limit)
		}
	}
	return d.cfg.Reader.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: after, Limit: limit})
}

// readLoss reads the loss of every training run of st.
func (d *Dashboard) readLoss(ctx context.Context, st *rolloutv1.RunStatusResponse) map[string][]LossPoint {
	out := map[string][]LossPoint{}
	for _, rc := range st.GetRuns() {
		if rc.GetKind() != "train" {
			continue
		}
		pts, err := d.cfg.Loss(ctx, rc.GetName())
		if err != nil {
			d.log.Debug("dashboard: training loss", "run", rc.GetName(), "error", err)
			continue
		}
		if len(pts) > maxLossPoints {
			pts = pts[len(pts)-maxLossPoints:]
		}
		out[rc.GetName()] = pts
	}
	return out
}

// describe turns a read error into a line for the page.
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unimplemented:
			return "not served by this cluster's version (" + st.Message() + ")"
		case codes.PermissionDenied:
			return "refused: " + st.Message()
		}
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// push appends a sample to the bounded history. Called with mu held.
func (d *Dashboard) push(p Point) {
	if len(d.history) >= d.cfg.History {
		n := copy(d.history, d.history[len(d.history)-d.cfg.History+1:])
		d.history = d.history[:n]
	}
	d.history = append(d.history, p)
}

// observe records a successful RunStatus read: a throughput sample, the
// per-run counts for rates and a term change seen. Called with mu held.
func (d *Dashboard) observe(st *rolloutv1.RunStatusResponse, now time.Time) {
	h := st.GetHeader()
	leader := leaderOf(h)
	fin := map[string]uint64{}
	var total uint64
	for _, rc := range st.GetRuns() {
		f := rc.GetDone() + rc.GetDead()
		fin[rc.GetName()] = f
		total += f
	}
	p := Point{UnixMs: now.UnixMilli(), OK: true, Finished: total, Term: h.GetTerm(), Leader: leader}
	for i := len(d.history) - 1; i >= 0; i-- {
		prev := d.history[i]
		if !prev.OK {
			continue
		}
		if dt := float64(p.UnixMs-prev.UnixMs) / 1000; dt > 0 && total >= prev.Finished {
			p.Rate = float64(total-prev.Finished) / dt
		}
		break
	}
	d.push(p)

	d.recent = append(d.recent, runSample{at: now, finished: fin})
	keep := 0
	for keep < len(d.recent)-1 && now.Sub(d.recent[keep+1].at) >= d.cfg.RateWindow {
		keep++
	}
	d.recent = d.recent[keep:]

	if t := h.GetTerm(); t > 0 {
		if _, ok := d.terms[t]; !ok {
			d.terms[t] = TermChange{Term: t, Leader: leader, UnixMs: now.UnixMilli(), Source: "observed"}
			d.trimTerms()
		}
	}
}

// addEvents appends new events, keeping the newest Config.Events, and
// takes leader elections into the term history. Called with mu held.
func (d *Dashboard) addEvents(r *rolloutv1.EventsResponse) {
	for _, e := range r.GetEvents() {
		if e.GetSeq() <= d.lastSeq {
			continue
		}
		d.lastSeq = e.GetSeq()
		d.events = append(d.events, e)
		if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED && e.GetTerm() > 0 {
			d.terms[e.GetTerm()] = TermChange{Term: e.GetTerm(), Leader: e.GetMember(), UnixMs: e.GetUnixMs(), Source: "event"}
		}
	}
	if over := len(d.events) - d.cfg.Events; over > 0 {
		d.events = append([]*rolloutv1.Event(nil), d.events[over:]...)
	}
	d.trimTerms()
}

// trimTerms keeps the newest maxTerms terms. Called with mu held.
func (d *Dashboard) trimTerms() {
	if len(d.terms) <= maxTerms {
		return
	}
	ts := make([]uint64, 0, len(d.terms))
	for t := range d.terms {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	for _, t := range ts[:len(ts)-maxTerms] {
		delete(d.terms, t)
	}
}

// leaderOf names the leader of a reply: the leader it names, else the
// replica that answered (a leader answering for itself).
func leaderOf(h *rolloutv1.ReplyHeader) string {
	if id := h.GetLeaderId(); id != "" {
		return id
	}
	return h.GetReplicaId()
}

// rate is run's finished items per second over the rate window (0 when
// not measurable yet). Called with mu held.
func (d *Dashboard) rate(run string) float64 {
	if len(d.recent) < 2 {
		return 0
	}
	last := d.recent[len(d.recent)-1]
	for _, s := range d.recent[:len(d.recent)-1] {
		f0, ok := s.finished[run]
		if !ok {
			continue
		}
		dt := last.at.Sub(s.at).Seconds()
		if f1 := last.finished[run]; dt > 0 && f1 >= f0 {
			return float64(f1-f0) / dt
		}
		return 0
	}
	return 0
}
