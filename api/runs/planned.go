package runs

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
)

// PlannedConfig is one submission of items the caller built itself (a
// training run's plan: items with ids, payloads and dependencies), as
// opposed to Submit's JSONL input files.
type PlannedConfig struct {
	Run string
	// Spec is the run's spec (kind, total, ...); nil is an empty spec.
	Spec *rolloutv1.RunSpec
	// Items are sent in this order. An item's depends_on must name items
	// that come earlier in Items (or already exist in the run): chunks are
	// cut in order, so every dependency is in an earlier request or earlier
	// in the same one.
	Items []*rolloutv1.SubmitItem
	// ChunkItems and ChunkBytes bound one SubmitItems call (the cluster's
	// announced limits bound it too).
	ChunkItems, ChunkBytes int
	// RetryDead and StaleAfter are SubmitItemsRequest's retry_dead and
	// stale_after_ms: what a resubmission does with dead items and with
	// running items whose owner has been silent.
	RetryDead  bool
	StaleAfter time.Duration
	// Timeout bounds each call to the cluster (with its retries).
	Timeout time.Duration
	// Coords are the addresses the limits may be asked at (after the
	// believed leader).
	Coords []string
	// Progress, when set, is told after every chunk how many items were
	// sent.
	Progress func(sent, total uint64)
	// Check, when set, is given the cluster's announced limits before
	// anything is sent; an error it returns ends SubmitPlanned with nothing
	// sent (a training config checks that its items fit).
	Check func(validate.Limits) error
}

// DefaultPlannedConfig returns the defaults of Submit's: chunks of at most
// DefaultChunkItems items and DefaultChunkBytes bytes, dead items retried,
// DefaultStaleAfter, DefaultTimeout.
func DefaultPlannedConfig() PlannedConfig {
	return PlannedConfig{
		ChunkItems: DefaultChunkItems,
		ChunkBytes: DefaultChunkBytes,
		RetryDead:  true,
		StaleAfter: DefaultStaleAfter,
		Timeout:    DefaultTimeout,
	}
}

// Validate reports the first problem with cfg (ErrInvalidConfig).
func (cfg *PlannedConfig) Validate() error {
	var what string
	switch {
	case cfg.Run == "":
		what = "Run is empty"
	case len(cfg.Items) == 0:
		what = "Items is empty"
	case cfg.ChunkItems <= 0:
		what = fmt.Sprintf("ChunkItems must be positive, got %d", cfg.ChunkItems)
	case cfg.ChunkBytes <= 0:
		what = fmt.Sprintf("ChunkBytes must be positive, got %d", cfg.ChunkBytes)
	case cfg.StaleAfter < 0:
		what = fmt.Sprintf("StaleAfter must not be negative, got %v", cfg.StaleAfter)
	case cfg.Timeout < 0:
		what = fmt.Sprintf("Timeout must not be negative, got %v", cfg.Timeout)
	default:
		return checkPlanOrder(cfg.Items)
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, what)
}

// checkPlanOrder refuses a plan in which an item depends on itself or on an
// item that comes later (a cycle, or a dependency the ledger would refuse
// because it does not exist yet), and ids given twice.
func checkPlanOrder(items []*rolloutv1.SubmitItem) error {
	pos := make(map[string]int, len(items))
	for i, it := range items {
		if j, dup := pos[string(it.GetId())]; dup {
			return fmt.Errorf("%w: items %d and %d have the same id", ErrInvalidConfig, j, i)
		}
		pos[string(it.GetId())] = i
	}
	for i, it := range items {
		for _, d := range it.GetDependsOn() {
			// A dependency not in the plan must already exist in the run;
			// the coordinator checks that.
			if j, ok := pos[string(d)]; ok && j >= i {
				return fmt.Errorf("%w: item %d (index %d) depends on item %d, which does not come before it", ErrInvalidConfig, i, it.GetIndex(), j)
			}
		}
	}
	return nil
}

// SubmitPlanned submits cfg.Items as run cfg.Run with cfg.Spec; submitting
// the same items again resumes the run (items are content-addressed: Done
// ones are skipped, dead ones retried when cfg.RetryDead).
//
// It first asks the cluster for its limits (as Submit does) and checks the
// run name, the spec and every item against them before anything is sent;
// then it sends the items in order, in chunks of at most cfg.ChunkItems and
// max_items_per_request items and at most cfg.ChunkBytes and
// max_request_bytes bytes. A chunk the coordinator is too busy for is sent
// again with backoff within cfg.Timeout. An error after the first chunk
// says how many items were submitted.
func SubmitPlanned(ctx context.Context, c Coordinator, cfg PlannedConfig) (*SubmitResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	lim, err := clusterLimits(ctx, c, cfg.Coords, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	if cfg.Check != nil {
		if err := cfg.Check(lim); err != nil {
			return nil, fmt.Errorf("%w; nothing was submitted", err)
		}
	}
	spec := cfg.Spec
	if spec == nil {
		spec = &rolloutv1.RunSpec{}
	}
	if err := lim.RunName(cfg.Run); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	if err := lim.Spec(spec); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	for i, it := range cfg.Items {
		if err := lim.Item(i, it); err != nil {
			return nil, fmt.Errorf("%w; nothing was submitted", err)
		}
	}
	maxItems := min(cfg.ChunkItems, lim.MaxItemsPerRequest)
	maxBytes := min(cfg.ChunkBytes, lim.MaxRequestBytes)
	base := &rolloutv1.SubmitItemsRequest{Run: cfg.Run, Spec: spec, RetryDead: cfg.RetryDead,
		StaleAfterMs: uint64(cfg.StaleAfter / time.Millisecond)}
	baseBytes := proto.Size(base)
	res := &SubmitResult{}
	total := uint64(len(cfg.Items))
	for start := 0; start < len(cfg.Items); {
		end, size := start, baseBytes
		for end < len(cfg.Items) && end-start < maxItems {
			n := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(cfg.Items[end]))
			if end > start && size+n > maxBytes {
				break
			}
			size += n
			end++
		}
		req := proto.Clone(base).(*rolloutv1.SubmitItemsRequest)
		req.Items = cfg.Items[start:end]
		if err := lim.CheckRequest(req); err != nil {
			return nil, fmt.Errorf("items %d..%d: %w (nothing more was submitted)", start, end-1, err)
		}
		resp, err := submitChunk(ctx, c, req, cfg.Timeout)
		if err != nil {
			what := fmt.Sprintf("submitting items %d..%d", start, end-1)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return nil, callError(what, cfg.Timeout, err)
		}
		res.Add(resp)
		res.Chunks++
		res.Items += uint64(end - start)
		if cfg.Progress != nil {
			cfg.Progress(res.Items, total)
		}
		start = end
	}
	return res, nil
}
