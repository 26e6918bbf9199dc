package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rollout/rollout/store"
)

// GCResult counts what CollectGarbage found and removed.
type GCResult struct {
	// Files counts the files with metadata (kept); Unfinished the files
	// without (uploads or output files whose writer died before the
	// metadata was written: never visible, never referenced).
	Files, Unfinished int
	// Removed counts the objects removed; Young those left because they
	// are younger than the grace period.
	Removed, Young int
}

func (r GCResult) String() string {
	return fmt.Sprintf("gateway: %d file(s), %d unfinished upload(s) or output(s); %d object(s) removed, %d left as younger than the grace period",
		r.Files, r.Unfinished, r.Removed, r.Young)
}

// CollectGarbage removes from st the objects of gateway files that never
// became visible: a file's bytes (or a store's temporary file of them)
// whose metadata object does not exist, once older than grace, measured
// from now. A gateway killed mid-upload, or mid-finalize, leaves such
// objects. A live upload writes its metadata right after its bytes, so a
// grace of minutes is safe; `rollout gc` passes its --grace. With dryRun
// it only counts.
func CollectGarbage(ctx context.Context, st *store.Store, grace time.Duration, now time.Time, dryRun bool) (GCResult, error) {
	var res GCResult
	if grace <= 0 {
		return res, fmt.Errorf("%w: grace must be positive, got %v", ErrInvalidConfig, grace)
	}
	prefix := Prefix + "files/"
	byFile := map[string][]store.Object{}
	var order []string
	err := st.List(ctx, prefix, func(o store.Object) error {
		id, _, ok := strings.Cut(o.Key[len(prefix):], "/")
		if !ok {
			return nil
		}
		if _, seen := byFile[id]; !seen {
			order = append(order, id)
		}
		byFile[id] = append(byFile[id], o)
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, id := range order {
		objs := byFile[id]
		visible := false
		for _, o := range objs {
			if o.Key == fileMetaKey(id) {
				visible = true
			}
		}
		if visible {
			res.Files++
			continue
		}
		res.Unfinished++
		for _, o := range objs {
			if now.Sub(o.ModTime) < grace {
				res.Young++
				continue
			}
			if dryRun {
				res.Removed++
				continue
			}
			if err := st.Delete(ctx, o.Key); err != nil {
				return res, err
			}
			res.Removed++
		}
	}
	return res, nil
}
