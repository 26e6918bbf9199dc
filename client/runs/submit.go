package runs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// Submit defaults.
const (
	DefaultChunkItems  = 1000
	DefaultChunkBytes  = 1 << 20
	DefaultMaxFailures = 3
	// DefaultStaleAfter is how long a Running item's owner may be silent
	// before a resubmit re-enqueues it.
	DefaultStaleAfter = 5 * time.Minute
)

// maxDeadReason bounds the reason sent for an invalid line (the ledger takes
// up to limits.MaxReasonBytes; a long file path must not push it over).
const maxDeadReason = 1024

// SubmitConfig is one submission of input files as a run.
type SubmitConfig struct {
	Run string
	// Files are the input files in index order (a config's glob, or one
	// file).
	Files []string
	// Model and Sampling are the run's model and sampling parameters: they
	// go into every sample id and the run's spec.
	Model    string
	Sampling batch.SamplingParams
	// SkipInvalid submits a run despite invalid lines, each recorded as a
	// failed item with its reason.
	SkipInvalid bool
	// StaleAfter re-enqueues Running items whose owner has been silent this
	// long (0: never).
	StaleAfter time.Duration
	// ChunkItems and ChunkBytes bound one SubmitItems call (the cluster's
	// announced limits bound it too).
	ChunkItems  int
	ChunkBytes  int
	MaxFailures uint32
	RetryDead   bool
	// Timeout bounds each call to the cluster (with its retries).
	Timeout time.Duration
	// Coords are the addresses the limits may be asked at one by one when
	// asking the cluster (Cluster with addr "") failed before Timeout; empty
	// asks only the cluster.
	Coords []string
	Read   batch.Config
	// Invalid, when set, is told every invalid line (up to
	// Read.MaxReportedErrors) as FILE:LINE: reason, one a line.
	Invalid io.Writer
	// Progress, when set, is told after every chunk how many of the
	// input's items were sent.
	Progress func(sent, total uint64)
	// Store, when set, is the run's object store: each input line goes
	// into content-addressed chunks of at most ChunkObjectBytes (only the
	// chunks not already stored are uploaded) and items carry a reference
	// (payload_ref), never the line; the run's spec records Store's URL
	// (its normal form; resuming a run the ledger holds on the same store
	// under another spelling, recorded before URLs were normalised, that
	// spelling).
	// Nil submits payloads inline (small runs, the raw API's way).
	Store            *store.Store
	ChunkObjectBytes int
	// InPlace says that Files are keys of objects already in Store: they
	// are read from there, and each valid item references its line where
	// it is (nothing is copied; only invalid lines recorded with
	// SkipInvalid go into a chunk of the run's own).
	InPlace bool
	// RetainAfter, when positive, deletes the run that long after it
	// finished (the run's spec retain).
	RetainAfter time.Duration
	// Priority is the run's priority, 1 (lowest) to 5 (highest); 0 leaves
	// it to the cluster (3). Tenant names the tenant the run is for; ""
	// is the caller's certificate's name (naming another needs an admin or
	// gateway certificate). Both are fixed when the run is created.
	Priority uint32
	Tenant   string
	// Cluster pins where the run runs (federation, RunSpec.cluster):
	// "local" (this cluster), a peer's name (handed to that peer), or ""
	// (the cluster decides when it creates the run: local when a live
	// local worker serves its model, else the first peer that does and
	// reaches its store, else local). Fixed when the run is created.
	Cluster string
	// Identity is the identity of the certificate the client presents
	// (mtls.IdentityOf its leaf); the zero Identity on a cluster without
	// TLS, or when unknown. Submit applies the replicas' tenant rule to it
	// (package tenancy) before it uploads anything: a client certificate
	// naming another Tenant, or a run that belongs to another tenant than
	// the one the submit acts as, is refused with ErrSubmitRefused naming
	// both, and nothing is uploaded.
	Identity mtls.Identity
	// Chunks, when set, is told how many input chunks were uploaded and
	// how many were already stored, once the submit is done.
	Chunks func(uploaded, reused int, bytes int64)
	// Layout chooses how a run with a Store is recorded: as ranges (one
	// ledger record per input chunk, SubmitRanges) or as items (one per
	// line, SubmitItems). LayoutDefault is DefaultLayout. A run the ledger
	// already holds is resumed as what it is, whatever Layout says.
	Layout Layout
}

// Layout is how Submit records a run in the ledger (SubmitConfig.Layout).
type Layout int

const (
	// LayoutDefault is DefaultLayout.
	LayoutDefault Layout = iota
	// LayoutItems: one record per input line (SubmitItems), each with its
	// sample id; inline runs (no Store), runs referencing their input in
	// place (InPlace) and runs with invalid lines recorded as failed items
	// (SkipInvalid) are always items.
	LayoutItems
	// LayoutRanges: the input goes into range chunks (store.RangeChunk) of
	// at most ChunkItems lines and ChunkObjectBytes bytes, each a ledger
	// record over its indexes (SubmitRanges, several chunks a request);
	// the ledger's cost grows with chunks, not lines. It needs a Store, and
	// refuses InPlace and invalid lines recorded with SkipInvalid.
	LayoutRanges
)

// DefaultLayout is the layout of LayoutDefault for a run with a Store:
// ranges where they can be (a Store, not InPlace, no invalid lines
// recorded as failed items, a client and a cluster that have
// SubmitRanges), items otherwise.
const DefaultLayout = LayoutRanges

func (l Layout) String() string {
	switch l {
	case LayoutDefault:
		return "default"
	case LayoutItems:
		return "items"
	case LayoutRanges:
		return "ranges"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// DefaultSubmitConfig returns the defaults: chunks of at most
// DefaultChunkItems items and DefaultChunkBytes bytes, DefaultMaxFailures,
// DefaultStaleAfter, failed items retried, default sampling and reading.
func DefaultSubmitConfig() SubmitConfig {
	return SubmitConfig{
		Sampling:    batch.DefaultSamplingParams(),
		StaleAfter:  DefaultStaleAfter,
		ChunkItems:  DefaultChunkItems,
		ChunkBytes:  DefaultChunkBytes,
		MaxFailures: DefaultMaxFailures,
		RetryDead:   true,
		Timeout:     DefaultTimeout,
		Read:        batch.DefaultConfig(),
	}
}

// Validate reports the first problem with cfg (ErrInvalidConfig).
func (cfg *SubmitConfig) Validate() error {
	var what string
	switch {
	case cfg.Run == "":
		what = "Run is empty"
	case len(cfg.Files) == 0:
		what = "Files is empty"
	case cfg.ChunkItems <= 0:
		what = fmt.Sprintf("ChunkItems must be positive, got %d", cfg.ChunkItems)
	case cfg.ChunkBytes <= 0:
		what = fmt.Sprintf("ChunkBytes must be positive, got %d", cfg.ChunkBytes)
	case cfg.MaxFailures == 0:
		what = "MaxFailures must be positive"
	case cfg.StaleAfter < 0:
		what = fmt.Sprintf("StaleAfter must not be negative, got %v", cfg.StaleAfter)
	case cfg.Timeout < 0:
		what = fmt.Sprintf("Timeout must not be negative, got %v", cfg.Timeout)
	case cfg.Layout < LayoutDefault || cfg.Layout > LayoutRanges:
		what = fmt.Sprintf("unknown Layout %v", cfg.Layout)
	case cfg.Layout == LayoutRanges && cfg.Store == nil:
		what = "LayoutRanges needs a Store (a range's lines are read from its chunk object)"
	case cfg.Layout == LayoutRanges && cfg.InPlace:
		what = "LayoutRanges cannot reference the input in place (InPlace): ranges read their lines from range chunks"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, what)
}

// SubmitResult sums the coordinator's answers over all chunks.
type SubmitResult struct {
	Items                                uint64
	Chunks                               int
	Created, AlreadyPending              uint64
	AlreadyRunning, AlreadyDone, Retried uint64
	Dead                                 uint64
	RependedStale, CreatedDead           uint64
}

// AddRanges counts one SubmitRanges answer (its counts are in items).
func (r *SubmitResult) AddRanges(resp *rolloutv1.SubmitRangesResponse) {
	r.Created += resp.GetCreated()
	r.AlreadyPending += resp.GetAlreadyPending()
	r.AlreadyRunning += resp.GetAlreadyRunning()
	r.AlreadyDone += resp.GetAlreadyDone()
	r.Retried += resp.GetRetried()
	r.Dead += resp.GetDead()
	r.RependedStale += resp.GetRependedStale()
	r.CreatedDead += resp.GetCreatedDead()
}

// Add counts one SubmitItems answer.
func (r *SubmitResult) Add(resp *rolloutv1.SubmitItemsResponse) {
	r.Created += uint64(resp.GetCreated())
	r.AlreadyPending += uint64(resp.GetAlreadyPending())
	r.AlreadyRunning += uint64(resp.GetAlreadyRunning())
	r.AlreadyDone += uint64(resp.GetAlreadyDone())
	r.Retried += uint64(resp.GetRetried())
	r.Dead += uint64(resp.GetDead())
	r.RependedStale += uint64(resp.GetRependedStale())
	r.CreatedDead += uint64(resp.GetCreatedDead())
}

// String says what happened, e.g. `1200 items in 2 chunks: 1200 created`.
func (r *SubmitResult) String() string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{r.Created, "created"}, {r.CreatedDead, "recorded as failed (invalid lines)"},
		{r.AlreadyDone, "already done"}, {r.AlreadyRunning, "already running (live owner, left alone)"},
		{r.AlreadyPending, "already pending"}, {r.Retried, "failed re-enqueued"},
		{r.RependedStale, "running with a silent owner re-enqueued"}, {r.Dead, "left failed"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no change")
	}
	chunks := "chunks"
	if r.Chunks == 1 {
		chunks = "chunk"
	}
	s := fmt.Sprintf("%d items in %d %s: %s", r.Items, r.Chunks, chunks, strings.Join(parts, ", "))
	if r.AlreadyDone == r.Items && r.Items > 0 {
		s += " (the run is already complete)"
	}
	return s
}

// Submit submits cfg.Files as run cfg.Run; submitting the same input to the
// same run again resumes it (items are content-addressed).
//
// It first asks the cluster for the limits it accepts (waiting within
// cfg.Timeout for a replica to answer, then each of cfg.Coords) and checks the run name and spec against them.
// It then validates the input files completely, telling cfg.Invalid every
// invalid line (up to cfg.Read.MaxReportedErrors) as FILE:LINE: reason (a
// line over the per-item limit is invalid: "exceeds the per-item limit of
// N bytes"), and submits nothing if any line is invalid, unless
// cfg.SkipInvalid: then each invalid line becomes a failed item
// (dead_reason = FILE:LINE: reason, cleaned by limits.CleanText; payload
// batch.InvalidPayload). An input with no items is an error. Otherwise it
// reads the files a second time and sends them in chunks of at most
// cfg.ChunkItems and max_items_per_request items and at most cfg.ChunkBytes
// and max_request_bytes bytes (as encoded), each checked with the
// coordinator's own validation (validate.Limits.CheckRequest) before it is
// sent. Every non-blank line takes the next index over the files in order;
// item id = batch.SampleID(cfg.Model, the request's SamplePrompt (the raw
// line for an invalid one), cfg.Sampling, index).
//
// With cfg.Store, it asks the cluster before it uploads anything whether
// the submit would be taken, and again before each input chunk is uploaded
// whether the run holds other items at the chunk's indexes: a refusal
// matches ErrSubmitRefused and leaves nothing new in the store (see
// preflight).
//
// A chunk refused because the coordinator is busy is sent again with
// backoff within cfg.Timeout. An error after the first chunk says how many
// items were submitted; submitting again resumes.
func Submit(ctx context.Context, c Coordinator, cfg SubmitConfig) (*SubmitResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	as, err := submitter(cfg.Identity, cfg.Run, cfg.Tenant)
	if err != nil {
		return nil, err
	}
	files := cfg.Files
	if err := cfg.Sampling.Validate(); err != nil {
		return nil, err
	}
	lim, err := clusterLimits(ctx, c, cfg.Coords, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	spec := &rolloutv1.RunSpec{MaxFailures: cfg.MaxFailures, Model: cfg.Model, Sampling: cfg.Sampling.JSON(),
		RetainMs: uint64(cfg.RetainAfter / time.Millisecond), Priority: cfg.Priority, Tenant: cfg.Tenant, Cluster: cfg.Cluster}
	if cfg.Store != nil {
		spec.Store = cfg.Store.URL()
	}
	if err := lim.RunName(cfg.Run); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	if err := lim.Spec(spec); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	read := cfg.Read
	read.MaxItemBytes = lim.MaxPayloadBytes
	if cfg.InPlace {
		if cfg.Store == nil {
			return nil, fmt.Errorf("%w: InPlace needs a Store", ErrInvalidConfig)
		}
		read.Open = func(key string) (io.ReadCloser, error) { return cfg.Store.NewReader(ctx, key) }
	}
	rep, err := batch.ValidateInputs(ctx, files, read)
	if err != nil {
		return nil, fmt.Errorf("validating input: %w", err)
	}
	if !rep.OK() {
		errOut := cfg.Invalid
		if errOut == nil {
			errOut = io.Discard
		}
		for _, e := range rep.Errors {
			fmt.Fprintln(errOut, e.Error())
		}
		if n := rep.Omitted(); n > 0 {
			fmt.Fprintf(errOut, "... and %d more invalid lines\n", n)
		}
		if !cfg.SkipInvalid || rep.Valid == 0 {
			return nil, fmt.Errorf("%w; nothing was submitted", rep.Err())
		}
		fmt.Fprintf(errOut, "--skip-invalid: the %d invalid line(s) are recorded as failed items\n", rep.Invalid)
	}
	spec.Total = rep.Records
	// Before anything goes into the store: would the cluster take it?
	var pre *preflight
	if cfg.Store != nil {
		if pre, err = newPreflight(ctx, c, cfg.Run, spec, cfg.Identity, as, cfg.Timeout); err != nil {
			return nil, err
		}
		if err := pre.dataPrefix(ctx, spec); err != nil {
			return nil, err
		}
	}

	if useRanges, err := chooseRanges(ctx, c, cfg, rep, pre); err != nil {
		return nil, err
	} else if useRanges {
		return submitRanges(ctx, c.(RangeSubmitter), cfg, lim, spec, rep.Records, pre, files, read)
	}

	sc, err := batch.NewScanner(files, read)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	res := &SubmitResult{}
	maxItems := min(cfg.ChunkItems, lim.MaxItemsPerRequest)
	maxBytes := min(cfg.ChunkBytes, lim.MaxRequestBytes)
	req := &rolloutv1.SubmitItemsRequest{Run: cfg.Run, Spec: spec, RetryDead: cfg.RetryDead,
		StaleAfterMs: uint64(cfg.StaleAfter / time.Millisecond)}
	baseBytes := proto.Size(req)
	chunkBytes := baseBytes
	send := func() error {
		if len(req.Items) == 0 {
			return nil
		}
		first, last := req.Items[0].Index, req.Items[len(req.Items)-1].Index
		if err := lim.CheckRequest(req); err != nil {
			return fmt.Errorf("items %d..%d do not pass the coordinator's checks (input changed since it was validated?): %w", first, last, err)
		}
		resp, err := submitChunk(ctx, c, req, cfg.Timeout)
		if err != nil {
			what := fmt.Sprintf("submitting items %d..%d", first, last)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return callError(what, cfg.Timeout, err)
		}
		res.Add(resp)
		res.Chunks++
		res.Items += uint64(len(req.Items))
		req.Items, chunkBytes = nil, baseBytes
		if cfg.Progress != nil {
			cfg.Progress(res.Items, rep.Records)
		}
		return nil
	}
	add := func(it *rolloutv1.SubmitItem) error {
		// The exact bytes the item adds to the request: its tag, length and
		// message (field 3 of SubmitItemsRequest).
		size := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(it))
		if len(req.Items) > 0 && (len(req.Items) >= maxItems || chunkBytes+size > maxBytes) {
			if err := send(); err != nil {
				return err
			}
		}
		req.Items = append(req.Items, it)
		chunkBytes += size
		return nil
	}
	// With a store, items wait for their chunk to be stored before they are
	// sent: the ledger never references bytes that are not durable.
	var chunker *store.Chunker
	var waiting []*rolloutv1.SubmitItem
	flush := func() error {
		if chunker == nil || chunker.Len() == 0 {
			return nil
		}
		if err := pre.check(ctx, waiting); err != nil {
			return err
		}
		key, err := chunker.Flush(ctx)
		if err != nil {
			return err
		}
		for _, it := range waiting {
			it.PayloadRef.Object = key
			if err := add(it); err != nil {
				return err
			}
		}
		waiting = waiting[:0]
		return nil
	}
	if cfg.Store != nil {
		chunker = store.NewChunker(cfg.Store, store.RunInputs(cfg.Run, spec.GetDataPrefix()), orDefaultInt(cfg.ChunkObjectBytes, store.DefaultChunkBytes))
	}
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("input changed since it was validated: %w", err)
		}
		it := &rolloutv1.SubmitItem{Index: rec.Index, Payload: rec.Raw}
		prompt := rec.Request.SamplePrompt
		if rec.Err != nil {
			if !cfg.SkipInvalid {
				return nil, fmt.Errorf("input changed since it was validated: %w", rec.Err)
			}
			prompt = string(rec.Raw)
			it.Payload, it.DeadReason = batch.InvalidPayload(rec), limits.CleanText(rec.Err.Error(), maxDeadReason)
		}
		id := batch.SampleID(cfg.Model, prompt, cfg.Sampling, rec.Index)
		it.Id = id[:]
		if cfg.InPlace && rec.Err == nil {
			// The line's object where it already is.
			it.PayloadRef = &rolloutv1.DataRef{Object: rec.File, Offset: uint64(rec.Offset), Length: uint64(len(it.Payload))}
			it.Payload = nil
			if err := add(it); err != nil {
				return nil, err
			}
			continue
		}
		if chunker == nil {
			if err := add(it); err != nil {
				return nil, err
			}
			continue
		}
		if !chunker.Fits(len(it.Payload)) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		off := chunker.Add(it.Payload)
		it.PayloadRef = &rolloutv1.DataRef{Offset: uint64(off), Length: uint64(len(it.Payload))}
		it.Payload = nil
		waiting = append(waiting, it)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := send(); err != nil {
		return nil, err
	}
	if chunker != nil && cfg.Chunks != nil {
		cfg.Chunks(chunker.Uploaded, chunker.Reused, chunker.Bytes)
	}
	if res.Items != rep.Records {
		return nil, fmt.Errorf("input changed since it was validated: %d items then, %d now", rep.Records, res.Items)
	}
	return res, nil
}

// submitChunk sends one SubmitItems request. A coordinator too busy to take
// it now (RESOURCE_EXHAUSTED: its in-flight request budget is full; the
// request changed nothing) is asked again with backoff until timeout.
func submitChunk(ctx context.Context, c Coordinator, req *rolloutv1.SubmitItemsRequest, timeout time.Duration) (*rolloutv1.SubmitItemsResponse, error) {
	return submitRetrying(ctx, c, req.GetRun(), req.GetSpec(), timeout, func(ctx context.Context) (*rolloutv1.SubmitItemsResponse, error) {
		return c.SubmitItems(ctx, req)
	})
}

// submitRetrying makes one submit call (SubmitItems or SubmitRanges of run,
// whose request holds spec): a coordinator too busy to take it now
// (RESOURCE_EXHAUSTED: its in-flight request budget is full; the request
// changed nothing) is asked again with backoff until timeout, and a run the
// ledger holds on this store spelled otherwise is resumed with its spelling.
func submitRetrying[R any](ctx context.Context, c Coordinator, run string, spec *rolloutv1.RunSpec, timeout time.Duration,
	call func(context.Context) (R, error)) (R, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	respelled := false
	for {
		resp, err := call(cctx)
		st := status.Convert(err)
		if st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "names store") && !respelled {
			// The ledger holds the run on another store string: if it is
			// this store spelled otherwise (recorded before store URLs
			// were normalised), resume with the run's own spelling.
			respelled = true
			if u := spec.GetStore(); u != "" {
				if _, rc, serr := Status(ctx, c, run, timeout); serr == nil &&
					rc.GetStore() != u && storeurl.SameStore(rc.GetStore(), u) {
					spec.Store = rc.GetStore()
					continue
				}
			}
		}
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "coordinator busy") {
			return resp, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-cctx.Done():
			t.Stop()
			var zero R
			return zero, fmt.Errorf("%w (last answer: %w)", cctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// clusterLimits asks the cluster for the limits it accepts (Cluster's
// limits): Cluster(ctx, "") first, which a coordclient.Client retries at
// each of its addresses until one answers or timeout (so a submit started
// while the cluster comes up waits for it), then, when that failed other
// than by running out of time, each of coords once. A coordinator that
// announces none gets validate.DefaultLimits. Nothing is created before
// this succeeds.
func clusterLimits(ctx context.Context, c Coordinator, coords []string, timeout time.Duration) (validate.Limits, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.Cluster(cctx, "")
	firstErr := err
	for _, addr := range coords {
		if err == nil || cctx.Err() != nil {
			break
		}
		resp, err = c.Cluster(cctx, addr)
	}
	if err != nil {
		return validate.Limits{}, callError("asking the cluster for its limits (nothing was submitted)", timeout, firstErr)
	}
	lim, err := validate.FromProto(resp.GetLimits())
	if err != nil {
		return validate.Limits{}, fmt.Errorf("the coordinator announced unusable limits: %w", err)
	}
	return lim, nil
}
