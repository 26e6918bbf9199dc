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

// ItemsConfig is one submission of items a program built rather than read
// from input files: a training run's steps, whose items depend on each
// other (SubmitItem.depends_on), under a run spec of its kind.
type ItemsConfig struct {
	Run string
	// Spec is the run's spec: kind ("" for batch inference, "train"),
	// model, sampling, max_failures (0: DefaultMaxFailures) and total (0:
	// the number of Items). The first submit to a run fixes it; later
	// ones may only raise the total.
	Spec *rolloutv1.RunSpec
	// Items in the order they are sent: every item's dependencies must
	// come earlier in Items or be reported by Existing, which is the
	// ledger's rule (the graph is acyclic by construction). Ids are
	// validate.Limits.IDBytes long, indexes distinct.
	Items []*rolloutv1.SubmitItem
	// Existing, when set, reports ids that the run already holds (sent by
	// an earlier submission) and that Items may depend on.
	Existing func(id []byte) bool
	// RetryDead re-pends Dead items that Items name again; StaleAfter
	// re-pends Running items whose owner has been silent this long (0:
	// never).
	RetryDead  bool
	StaleAfter time.Duration
	// ChunkItems and ChunkBytes bound one SubmitItems call (0: the
	// defaults; the cluster's announced limits bound it too). A chunk
	// boundary never reorders items, so a dependency is always sent before
	// its dependents.
	ChunkItems int
	ChunkBytes int
	// Timeout bounds each call to the cluster (with its retries; 0:
	// DefaultTimeout). Coords are the addresses the limits may be asked at
	// one by one when asking the cluster failed before Timeout.
	Timeout time.Duration
	Coords  []string
	// Progress, when set, is told after every chunk how many items were
	// sent.
	Progress func(sent, total uint64)
}

// SubmitItems submits cfg.Items as run cfg.Run with spec cfg.Spec.
//
// It asks the cluster for the limits it accepts and checks everything
// before it sends anything: the run name and spec, every item
// (validate.Limits.Item: id, JSON-object payload, dead reason, depends_on),
// no id twice, and every dependency earlier in Items or known to Existing
// (validate.DepsClosed). A refusal is returned with nothing sent. It then
// sends the items in order in chunks bounded like Submit's, each checked
// with validate.Limits.CheckRequest; the ledger judges each chunk again
// (for instance a resubmitted item whose depends_on differs from the one
// it holds is refused). Submitting the same items again is a no-op per
// item, so a failed submission is resumed by submitting again; an error
// after the first chunk says how many items were sent.
func SubmitItems(ctx context.Context, c Coordinator, cfg ItemsConfig) (*SubmitResult, error) {
	switch {
	case cfg.Run == "":
		return nil, fmt.Errorf("%w: Run is empty", ErrInvalidConfig)
	case len(cfg.Items) == 0:
		return nil, fmt.Errorf("%w: Items is empty", ErrInvalidConfig)
	case cfg.ChunkItems < 0 || cfg.ChunkBytes < 0:
		return nil, fmt.Errorf("%w: ChunkItems and ChunkBytes must not be negative, got %d and %d", ErrInvalidConfig, cfg.ChunkItems, cfg.ChunkBytes)
	case cfg.StaleAfter < 0 || cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: StaleAfter and Timeout must not be negative, got %v and %v", ErrInvalidConfig, cfg.StaleAfter, cfg.Timeout)
	}
	timeout := orDefault(cfg.Timeout, DefaultTimeout)
	spec := &rolloutv1.RunSpec{}
	if cfg.Spec != nil {
		spec = proto.Clone(cfg.Spec).(*rolloutv1.RunSpec)
	}
	if spec.MaxFailures == 0 {
		spec.MaxFailures = DefaultMaxFailures
	}
	if spec.Total == 0 {
		spec.Total = uint64(len(cfg.Items))
	}
	lim, err := clusterLimits(ctx, c, cfg.Coords, timeout)
	if err != nil {
		return nil, err
	}
	if err := checkItems(lim, cfg, spec); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}

	res := &SubmitResult{}
	maxItems := min(orDefaultInt(cfg.ChunkItems, DefaultChunkItems), lim.MaxItemsPerRequest)
	maxBytes := min(orDefaultInt(cfg.ChunkBytes, DefaultChunkBytes), lim.MaxRequestBytes)
	req := &rolloutv1.SubmitItemsRequest{Run: cfg.Run, Spec: spec, RetryDead: cfg.RetryDead,
		StaleAfterMs: uint64(cfg.StaleAfter / time.Millisecond)}
	baseBytes := proto.Size(req)
	chunkBytes := baseBytes
	total := uint64(len(cfg.Items))
	send := func() error {
		if len(req.Items) == 0 {
			return nil
		}
		if err := lim.CheckRequest(req); err != nil {
			return fmt.Errorf("items %d..%d: %w", res.Items, res.Items+uint64(len(req.Items))-1, err)
		}
		resp, err := submitChunk(ctx, c, req, timeout)
		if err != nil {
			what := fmt.Sprintf("submitting items %d..%d of %d", res.Items, res.Items+uint64(len(req.Items))-1, total)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return callError(what, timeout, err)
		}
		res.Add(resp)
		res.Chunks++
		res.Items += uint64(len(req.Items))
		req.Items, chunkBytes = nil, baseBytes
		if cfg.Progress != nil {
			cfg.Progress(res.Items, total)
		}
		return nil
	}
	for _, it := range cfg.Items {
		size := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(it))
		if len(req.Items) > 0 && (len(req.Items) >= maxItems || chunkBytes+size > maxBytes) {
			if err := send(); err != nil {
				return nil, err
			}
		}
		req.Items = append(req.Items, it)
		chunkBytes += size
	}
	if err := send(); err != nil {
		return nil, err
	}
	return res, nil
}

// checkItems is SubmitItems' check of the whole submission.
func checkItems(lim validate.Limits, cfg ItemsConfig, spec *rolloutv1.RunSpec) error {
	if err := lim.RunName(cfg.Run); err != nil {
		return err
	}
	if err := lim.Spec(spec); err != nil {
		return err
	}
	seen := make(map[string]int, len(cfg.Items))
	for i, it := range cfg.Items {
		if err := lim.Item(i, it); err != nil {
			return err
		}
		if j, dup := seen[string(it.GetId())]; dup {
			return &validate.ItemError{Pos: i, Index: it.GetIndex(), ID: it.GetId(), Err: fmt.Errorf("%w: same id as items[%d]", validate.ErrDuplicateID, j)}
		}
		seen[string(it.GetId())] = i
		// One item must fit in a request on its own.
		req := &rolloutv1.SubmitItemsRequest{Run: cfg.Run, Spec: spec, Items: []*rolloutv1.SubmitItem{it}}
		if n := proto.Size(req); n > lim.MaxRequestBytes {
			return &validate.ItemError{Pos: i, Index: it.GetIndex(), ID: it.GetId(),
				Err: fmt.Errorf("%w: the item makes a %d-byte request, exceeds the per-request limit of %d bytes", validate.ErrTooLarge, n, lim.MaxRequestBytes)}
		}
	}
	return validate.DepsClosed(cfg.Items, cfg.Existing)
}

func orDefaultInt(n, d int) int {
	if n == 0 {
		return d
	}
	return n
}
