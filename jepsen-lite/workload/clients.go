package workload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// SubmitConfig configures a Submitter.
type SubmitConfig struct {
	// Runs are the run names; each gets ItemsPerRun items.
	Runs        []string
	ItemsPerRun int
	// ChunkSize is the number of items per SubmitItems call.
	ChunkSize int
	// Span spreads the chunks evenly over this long (0: back to back).
	Span time.Duration
	// MaxFailures is the runs' failed-attempt limit (items fail at random
	// in the mock backend; a high limit keeps them from going Dead).
	MaxFailures uint32
	// Stores are the object stores of the runs that keep their data in
	// one (RunSpec.store): each chunk's payloads are stored there
	// (runs.StorePayloads) before the chunk is submitted by reference.
	// Runs not in it are submitted inline.
	Stores map[string]*store.Store
	// RangeRuns are the runs (of Runs) with the range layout (ranges.go),
	// submitted in chunks of RangeChunkSize lines (default 10 ChunkSize),
	// each stored in the run's store (it must have one).
	RangeRuns      []string
	RangeChunkSize int
	// Tenants, when set, names each run's tenant and priority (every
	// submit of the run says them in its spec); a run not in it names
	// none (the submitting certificate's, at the default priority).
	// Naming a tenant needs an admin (or gateway) certificate, or an
	// insecure cluster.
	Tenants map[string]RunTenant
	// Adjust, when set, changes each run's spec before every submit of
	// the run, after Tenants (the federation scenario pins a run to a
	// cluster: RunSpec.cluster). It must do the same for every submit of a
	// run: the spec is fixed when the run is created.
	Adjust func(run string, s *rolloutv1.RunSpec)
	// DataPrefixes, when set for a run of Stores, is its data prefix
	// (RunSpec.data_prefix, storeurl.DataPrefix: as rollout submit makes
	// one), sent in every submit, its payloads stored under its input
	// prefix; a run not in it has the layout of runs without one
	// (runs/NAME/).
	DataPrefixes map[string]string
}

// RunTenant is a run's tenant and priority (RunSpec.tenant, priority).
type RunTenant struct {
	Tenant   string
	Priority uint32
}

// DefaultSubmitConfig returns one run "run" of 100 items in chunks of 25,
// submitted back to back, with 10 failed attempts allowed per item.
func DefaultSubmitConfig() SubmitConfig {
	return SubmitConfig{Runs: []string{"run"}, ItemsPerRun: 100, ChunkSize: 25, MaxFailures: 10}
}

// Validate reports the first problem with c.
func (c SubmitConfig) Validate() error {
	switch {
	case len(c.Runs) == 0:
		return fmt.Errorf("%w: Runs is empty", ErrInvalidConfig)
	case c.ItemsPerRun <= 0:
		return fmt.Errorf("%w: ItemsPerRun must be > 0", ErrInvalidConfig)
	case c.ChunkSize <= 0:
		return fmt.Errorf("%w: ChunkSize must be > 0", ErrInvalidConfig)
	case c.Span < 0:
		return fmt.Errorf("%w: Span must be >= 0", ErrInvalidConfig)
	}
	for i, r := range c.Runs {
		if r == "" || slices.Index(c.Runs, r) != i {
			return fmt.Errorf("%w: Runs[%d] %q is empty or repeated", ErrInvalidConfig, i, r)
		}
	}
	for _, r := range c.RangeRuns {
		if !slices.Contains(c.Runs, r) || c.Stores[r] == nil {
			return fmt.Errorf("%w: range run %q is not in Runs or has no store", ErrInvalidConfig, r)
		}
	}
	for r, t := range c.Tenants {
		switch {
		case !slices.Contains(c.Runs, r):
			return fmt.Errorf("%w: Tenants names run %q, which is not in Runs", ErrInvalidConfig, r)
		case t.Tenant == "":
			return fmt.Errorf("%w: Tenants[%q] names no tenant", ErrInvalidConfig, r)
		case t.Priority > 5:
			return fmt.Errorf("%w: Tenants[%q] priority %d: a priority is 1 to 5 (0: the default)", ErrInvalidConfig, r, t.Priority)
		}
	}
	for r, p := range c.DataPrefixes {
		if c.Stores[r] == nil || slices.Contains(c.RangeRuns, r) {
			return fmt.Errorf("%w: DataPrefixes names run %q, which has no store or is a range run", ErrInvalidConfig, r)
		}
		if _, _, _, err := storeurl.ParseDataPrefix(p); err != nil {
			return fmt.Errorf("%w: DataPrefixes[%q]: %v", ErrInvalidConfig, r, err)
		}
	}
	if c.RangeChunkSize < 0 {
		return fmt.Errorf("%w: RangeChunkSize must be >= 0", ErrInvalidConfig)
	}
	return nil
}

// spec sets run's tenant and priority (Tenants) in s and returns it.
func (c SubmitConfig) spec(run string, s *rolloutv1.RunSpec) *rolloutv1.RunSpec {
	if t, ok := c.Tenants[run]; ok {
		s.Tenant, s.Priority = t.Tenant, t.Priority
	}
	if c.Adjust != nil {
		c.Adjust(run, s)
	}
	return s
}

// chunkSize is the number of items per submit call of run.
func (c SubmitConfig) chunkSize(run string) int {
	if !slices.Contains(c.RangeRuns, run) {
		return c.ChunkSize
	}
	if c.RangeChunkSize > 0 {
		return c.RangeChunkSize
	}
	return 10 * c.ChunkSize
}

// chunk is one SubmitItems call's worth of items.
type chunk struct {
	run      string
	from, to uint64 // item indexes [from, to)
}

// Submitter submits runs in chunks and retries each chunk until it is
// acknowledged (submitting is idempotent).
type Submitter struct {
	cl     *Client
	cfg    SubmitConfig
	chunks []chunk

	mu    sync.Mutex
	acked []bool
	next  int // first chunk not yet acknowledged
}

// NewSubmitter returns a Submitter for cfg recording through cl.
func NewSubmitter(cl *Client, cfg SubmitConfig) (*Submitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Submitter{cl: cl, cfg: cfg}
	// Each run's chunks in order, the runs interleaved so that every run
	// is submitted over the whole span: chunk k of n of a run goes at k/n.
	type placed struct {
		c   chunk
		pos float64
	}
	var all []placed
	for _, r := range cfg.Runs {
		size := cfg.chunkSize(r)
		per := (cfg.ItemsPerRun + size - 1) / size
		for k := range per {
			from := uint64(k * size)
			to := min(from+uint64(size), uint64(cfg.ItemsPerRun))
			all = append(all, placed{chunk{run: r, from: from, to: to}, float64(k) / float64(per)})
		}
	}
	slices.SortStableFunc(all, func(a, b placed) int { return cmp.Compare(a.pos, b.pos) })
	for _, p := range all {
		s.chunks = append(s.chunks, p.c)
	}
	s.acked = make([]bool, len(s.chunks))
	return s, nil
}

// Totals returns the number of items of each run.
func (s *Submitter) Totals() map[string]uint64 {
	out := map[string]uint64{}
	for _, r := range s.cfg.Runs {
		out[r] = uint64(s.cfg.ItemsPerRun)
	}
	return out
}

// Unacked returns how many chunks are not acknowledged yet.
func (s *Submitter) Unacked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.acked {
		if !a {
			n++
		}
	}
	return n
}

// SubmitNext submits the next unacknowledged chunk once; it reports
// whether every chunk is acknowledged.
func (s *Submitter) SubmitNext(ctx context.Context) (bool, error) {
	s.mu.Lock()
	for s.next < len(s.chunks) && s.acked[s.next] {
		s.next++
	}
	k := s.next
	s.mu.Unlock()
	if k >= len(s.chunks) {
		return true, nil
	}
	c := s.chunks[k]
	if slices.Contains(s.cfg.RangeRuns, c.run) {
		if err := s.submitRangeChunk(ctx, c, s.cfg.Stores[c.run]); err != nil {
			return false, err
		}
		return s.ack(k), nil
	}
	req := &rolloutv1.SubmitItemsRequest{
		Run:  c.run,
		Spec: s.cfg.spec(c.run, &rolloutv1.RunSpec{MaxFailures: s.cfg.MaxFailures, Model: ItemModel, Total: uint64(s.cfg.ItemsPerRun)}),
	}
	for i := c.from; i < c.to; i++ {
		req.Items = append(req.Items, &rolloutv1.SubmitItem{Id: ItemID(c.run, i), Index: i, Payload: Payload(c.run, i)})
	}
	if st := s.cfg.Stores[c.run]; st != nil {
		req.Spec.Store = st.URL()
		req.Spec.DataPrefix = s.cfg.DataPrefixes[c.run]
		sctx, cancel := context.WithTimeout(ctx, s.cl.OpTimeout)
		_, _, err := runs.StorePayloadsUnder(sctx, st, storeurl.RunInputs(c.run, req.Spec.DataPrefix), req.Items)
		cancel()
		if err != nil {
			return false, fmt.Errorf("workload: storing the payloads of %s [%d, %d): %w", c.run, c.from, c.to, err)
		}
	}
	if _, err := s.cl.Submit(ctx, req); err != nil {
		return false, err
	}
	return s.ack(k), nil
}

// ack marks chunk k acknowledged and reports whether every chunk is.
func (s *Submitter) ack(k int) bool {
	s.mu.Lock()
	s.acked[k] = true
	s.mu.Unlock()
	return k == len(s.chunks)-1 && s.Unacked() == 0
}

// Run submits the chunks spread over Span from now, retrying each until it
// is acknowledged, and returns when all are or ctx ends.
func (s *Submitter) Run(ctx context.Context) error {
	start := time.Now()
	n := len(s.chunks)
	for k := 0; ctx.Err() == nil; k++ {
		if s.cfg.Span > 0 && k < n {
			if !Sleep(ctx, time.Until(start.Add(s.cfg.Span*time.Duration(k)/time.Duration(n)))) {
				break
			}
		}
		done, err := s.SubmitNext(ctx)
		if done {
			return nil
		}
		if err != nil {
			Sleep(ctx, 300*time.Millisecond)
		}
	}
	return ctx.Err()
}

// Sleep waits d, or until ctx ends. It reports whether ctx is still live:
// false means the caller should stop. A d <= 0 returns at once. The harness's
// other packages (runner, hostile) pace themselves with it too.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Read reads status and pages of results of runs (each of total items)
// until ctx ends, pausing 100-300 ms between reads.
func Read(ctx context.Context, cl *Client, totals map[string]uint64, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7265616465))
	runs := make([]string, 0, len(totals))
	for r := range totals {
		runs = append(runs, r)
	}
	slices.Sort(runs)
	for ctx.Err() == nil {
		_, _ = cl.Status(ctx)
		if !Sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
			return
		}
		run := runs[rng.IntN(len(runs))]
		const page = 50
		from := uint64(rng.IntN(int(totals[run]/page)+1)) * page
		_, _ = cl.Results(ctx, run, from, page)
		if !Sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
			return
		}
	}
}

// WaitComplete polls status until every run in totals holds its total of
// items, all Done or Dead, or ctx ends (ErrIncomplete naming the last
// counters).
func WaitComplete(ctx context.Context, cl *Client, totals map[string]uint64) error {
	last, read := "no status read", false
	for {
		resp, err := cl.Status(ctx)
		if err == nil {
			byRun := map[string]*rolloutv1.RunCounters{}
			for _, rc := range resp.GetRuns() {
				byRun[rc.GetName()] = rc
			}
			complete := true
			var parts []string
			for run, n := range totals {
				rc := byRun[run]
				if rc == nil || rc.GetTotal() != n || rc.GetDone()+rc.GetDead() != n {
					complete = false
				}
				parts = append(parts, fmt.Sprintf("%s: total=%d pending=%d running=%d done=%d dead=%d",
					run, rc.GetTotal(), rc.GetPending(), rc.GetRunning(), rc.GetDone(), rc.GetDead()))
			}
			slices.Sort(parts)
			last, read = strings.Join(parts, "; "), true
			if complete {
				return nil
			}
		} else if !read {
			last = err.Error()
		}
		if !Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("%w: %s", ErrIncomplete, last)
		}
	}
}

// Straggler claims items as a worker that then goes silent past the
// coordinator's failure timeout, waits until other workers have taken its
// items over, and reports them Done late with the very bytes a worker would
// send. A correct ledger refuses those reports (CAS miss); a ledger without
// its compare-and-swap accepts a second result.
type Straggler struct {
	cl     *Client
	reader *Client // reads Results; cl when unset
	id     string
	mock   *mock.Backend
	held   []*rolloutv1.Item
	open   func(ctx context.Context, url string) (*store.Store, error)
	models []string
}

// SetModels makes the straggler register serving models only, so that it
// claims the runs of those models (RangeModel: ranges only). Call it
// before Claim.
func (s *Straggler) SetModels(models ...string) { s.models = models }

// NewStraggler returns a straggler acting as worker id.
func NewStraggler(cl *Client, id string) (*Straggler, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: straggler id is empty", ErrInvalidConfig)
	}
	b, err := mock.New(mock.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return &Straggler{cl: cl, id: id, mock: b}, nil
}

// ID returns the straggler's worker id.
func (s *Straggler) ID() string { return s.id }

// ReadWith makes the straggler read Results through reader: with roles in
// certificates its own (worker) identity may claim and report but not read
// runs. Call it before Finish.
func (s *Straggler) ReadWith(reader *Client) { s.reader = reader }

// UseStores makes the straggler handle items of runs with an object store
// as a worker does: read the payload by reference, write the result into
// the store and report it by reference. open returns the store of a URL.
func (s *Straggler) UseStores(open func(ctx context.Context, url string) (*store.Store, error)) {
	s.open = open
}

// result computes item it's result as a worker would and returns the
// report's result fields: inline, or written to the run's store.
func (s *Straggler) result(ctx context.Context, it *rolloutv1.Item) ([]byte, *rolloutv1.DataRef, error) {
	payload := it.GetPayload()
	var st *store.Store
	if it.GetStore() != "" {
		if s.open == nil {
			return nil, nil, fmt.Errorf("workload: straggler: run %s keeps its data in a store and no store opener is set", it.GetRun())
		}
		var err error
		if st, err = s.open(ctx, it.GetStore()); err != nil {
			return nil, nil, err
		}
		ref := it.GetPayloadRef()
		if payload, err = st.ReadRange(ctx, ref.GetObject(), int64(ref.GetOffset()), int64(ref.GetLength())); err != nil {
			return nil, nil, err
		}
	}
	res, err := s.mock.Run(ctx, worker.Item{Run: it.GetRun(), ID: it.GetId(), Index: it.GetIndex(), Payload: payload, Attempt: it.GetAttempt()})
	if err != nil || st == nil {
		return res, nil, err
	}
	key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), res)
	if err != nil {
		return nil, nil, err
	}
	return nil, &rolloutv1.DataRef{Object: key, Length: uint64(len(res)), Blake3: sum[:]}, nil
}

// Claim registers the straggler and claims up to max items, retrying
// (registering again when the coordinator says it is not registered) until
// it holds some or ctx ends.
func (s *Straggler) Claim(ctx context.Context, max uint32) (int, error) {
	registered := false
	for {
		if !registered {
			if _, err := s.cl.Register(ctx, s.id, s.models...); err != nil {
				if !Sleep(ctx, 100*time.Millisecond) {
					return 0, ctx.Err()
				}
				continue
			}
			registered = true
		}
		resp, err := s.cl.Claim(ctx, s.id, max, time.Second)
		if errors.Is(err, coordclient.ErrNotRegistered) {
			registered = false
		}
		if err == nil && len(resp.GetItems()) > 0 {
			s.held = append(s.held, resp.GetItems()...)
			return len(resp.GetItems()), nil
		}
		if !Sleep(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// LateResult is what the ledger answered to one late report.
type LateResult struct {
	Index  uint64
	Status string
}

// Finish waits until every held item has moved on (re-pended, owned by
// another worker or Done) and at least one is Done by another worker (a
// range: its first index), or ctx ends; then it reports every held item Done at its old attempt and
// returns the ledger's answers. It reports even when ctx ended early (the
// report then gets a fresh context of up to 10s). A held range is
// reported with ReportRange (lateRange).
func (s *Straggler) Finish(ctx context.Context) ([]LateResult, bool, error) {
	overtaken := false
	for !overtaken && ctx.Err() == nil {
		moved, doneByOther := 0, 0
		for _, it := range s.held {
			recs, err := s.records(ctx, it)
			if err != nil {
				continue
			}
			mine := false
			for _, r := range recs {
				if r.GetState() == rolloutv1.ItemState_ITEM_STATE_RUNNING && r.GetOwner() == s.id && r.GetAttempt() == it.GetAttempt() {
					mine = true
				}
				// A range counts as overtaken once its first index is Done
				// by another worker (lateRange reports that segment).
				if r.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE && r.GetOwner() != s.id && (it.GetCount() == 0 || r.GetIndex() == it.GetIndex()) {
					doneByOther++
				}
			}
			if !mine && len(recs) > 0 {
				moved++
			}
		}
		overtaken = moved == len(s.held) && doneByOther > 0
		if !overtaken {
			Sleep(ctx, 300*time.Millisecond)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var out []LateResult
	var items []*rolloutv1.Item
	for _, it := range s.held {
		if it.GetCount() == 0 {
			items = append(items, it)
			continue
		}
		lr, err := s.lateRange(rctx, it)
		if err != nil {
			return nil, overtaken, err
		}
		out = append(out, lr)
	}
	lrs, err := s.lateItems(rctx, items)
	if err != nil {
		return nil, overtaken, err
	}
	s.held = nil
	return append(out, lrs...), overtaken, nil
}

// readClient is the client that reads Results.
func (s *Straggler) readClient() *Client {
	if s.reader != nil {
		return s.reader
	}
	return s.cl
}

// records reads the ledger's records of held item or range it: the item,
// or the records that hold the range's indexes now.
func (s *Straggler) records(ctx context.Context, it *rolloutv1.Item) ([]*rolloutv1.ResultItem, error) {
	n := max(it.GetCount(), 1)
	resp, err := s.readClient().Results(ctx, it.GetRun(), it.GetIndex(), uint32(min(n, 100)))
	if err != nil {
		return nil, err
	}
	var out []*rolloutv1.ResultItem
	for _, r := range resp.GetItems() {
		end := r.GetIndex() + max(r.GetCount(), 1)
		if end > it.GetIndex() && r.GetIndex() < it.GetIndex()+n {
			out = append(out, r)
		}
	}
	if it.GetCount() == 0 && len(out) > 1 {
		out = out[:1]
	}
	return out, nil
}

// lateItems reports the held items Done at their old attempts.
func (s *Straggler) lateItems(rctx context.Context, items []*rolloutv1.Item) ([]LateResult, error) {
	var reports []*rolloutv1.ItemReport
	for _, it := range items {
		res, ref, err := s.result(rctx, it)
		if err != nil {
			return nil, fmt.Errorf("workload: straggler result for %s/%d: %w", it.GetRun(), it.GetIndex(), err)
		}
		reports = append(reports, &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE,
			Result: res, ResultRef: ref})
	}
	if len(reports) == 0 {
		return nil, nil
	}
	resp, err := s.cl.Report(rctx, s.id, reports)
	if err != nil {
		return nil, err
	}
	var out []LateResult
	for i, r := range resp.GetResults() {
		idx := uint64(0)
		if i < len(items) {
			idx = items[i].GetIndex()
		}
		out = append(out, LateResult{Index: idx, Status: strings.TrimPrefix(r.GetStatus().String(), "REPORT_STATUS_")})
	}
	return out, nil
}
