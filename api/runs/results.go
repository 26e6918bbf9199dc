package runs

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/store"
)

// DefaultPageSize is how many items one Results call asks for.
const DefaultPageSize = 500

// deadNoReason stands in for a dead item's reason when the ledger kept none.
const deadNoReason = "item is dead (no reason recorded)"

// ResultsConfig configures Results, WriteFile and WriteDir.
type ResultsConfig struct {
	// PageSize is how many items one call asks for (0: DefaultPageSize); a
	// page too large for one message is asked for again with half as many.
	PageSize uint32
	// Timeout bounds each call, with the client's retries (0:
	// DefaultTimeout).
	Timeout time.Duration
	// Store is the run's object store, for runs whose payloads and results
	// are references (WriteFile and WriteDir read them through a bounded
	// cache of CacheBytes, DefaultCacheBytes when 0).
	Store      *store.Store
	CacheBytes int64
}

// Results calls fn with every item of the run in index order, page by
// page, whatever its state; an error fn returns ends it with that error. It
// checks that the pages advance and stay in order (an error otherwise). A
// page too large for one message (RESOURCE_EXHAUSTED) is asked for again
// with half as many items. An unknown run is an error matching
// ErrRunNotFound; a failed call is a *CallError.
func Results(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig, fn func(*rolloutv1.ResultItem) error) error {
	pageSize := cfg.PageSize
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	timeout := orDefault(cfg.Timeout, DefaultTimeout)
	if timeout < 0 {
		return fmt.Errorf("%w: Timeout must not be negative, got %v", ErrInvalidConfig, timeout)
	}
	var from, lastIndex uint64
	first := true
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := c.Results(cctx, &rolloutv1.ResultsRequest{Run: run, FromIndex: from, Limit: pageSize})
		cancel()
		if status.Code(err) == codes.ResourceExhausted && pageSize > 1 {
			// The page is larger than a message may be (big payloads or
			// results): ask for fewer items at a time.
			pageSize /= 2
			continue
		}
		if isNotFound(err) {
			return newNotFound(run, err)
		}
		if err != nil {
			return callError(fmt.Sprintf("reading results from index %d", from), timeout, err)
		}
		for _, it := range resp.GetItems() {
			if !first && it.GetIndex() <= lastIndex {
				return fmt.Errorf("coordinator returned item index %d after %d: results out of order", it.GetIndex(), lastIndex)
			}
			if it.GetIndex() < from {
				return fmt.Errorf("coordinator returned item index %d for a page starting at %d", it.GetIndex(), from)
			}
			first, lastIndex = false, it.GetIndex()
			if err := fn(it); err != nil {
				return err
			}
		}
		if resp.GetDone() {
			return nil
		}
		next := resp.GetNextIndex()
		if next <= from || (!first && next <= lastIndex) {
			return fmt.Errorf("coordinator's results page did not advance (from %d, next %d)", from, next)
		}
		from = next
	}
}

// FileSummary counts what WriteFile wrote and skipped.
type FileSummary struct {
	Lines, Done, Dead, Skipped uint64
	// Unrenderable counts the items written as an error line because their
	// id, payload or result could not be rendered.
	Unrenderable uint64
}

func (s FileSummary) String() string {
	str := fmt.Sprintf("%d lines (%d done, %d dead)", s.Lines, s.Done, s.Dead)
	if s.Unrenderable > 0 {
		str += fmt.Sprintf("; %d item(s) could not be rendered (see their error lines)", s.Unrenderable)
	}
	if s.Skipped > 0 {
		str += fmt.Sprintf("; %d items not finished yet were skipped", s.Skipped)
	}
	return str
}

// DirSummary counts what WriteDir wrote and skipped.
type DirSummary struct {
	batch.OutputSummary
	Skipped uint64
}

func (s DirSummary) String() string {
	str := s.OutputSummary.String()
	if s.Skipped > 0 {
		str += fmt.Sprintf("; %d items not finished yet were skipped (partial results)", s.Skipped)
	}
	return str
}

// WriteFile pages through the run's items in index order (Results) and
// writes one line per Done or Dead item to path (batch.RenderLine; error
// lines of OpenAI Batch requests included), atomically: on any error no
// file (and no partial file) is left at path. Items not finished yet are
// skipped and counted. An item whose id, payload or result cannot be
// rendered becomes an error line with the reason (batch.UnrenderableLine)
// and the rest of the run is still written.
func WriteFile(ctx context.Context, c ResultsReader, run, path string, cfg ResultsConfig) (FileSummary, error) {
	var sum FileSummary
	w, err := batch.NewAtomicWriter(path, 0o644)
	if err != nil {
		return sum, err
	}
	defer w.Abort() // a no-op after Commit
	return sum, writeLines(ctx, c, run, cfg, w, &sum)
}

// WriteTo is WriteFile onto any writer (a store object, say): the caller
// commits or discards what was written.
func WriteTo(ctx context.Context, c ResultsReader, run string, w interface{ Write([]byte) (int, error) }, cfg ResultsConfig) (FileSummary, error) {
	var sum FileSummary
	err := writeLines(ctx, c, run, cfg, nopCommit{w}, &sum)
	return sum, err
}

type nopCommit struct {
	w interface{ Write([]byte) (int, error) }
}

func (n nopCommit) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopCommit) Commit() error                 { return nil }

func writeLines(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig, w interface {
	Write([]byte) (int, error)
	Commit() error
}, sum *FileSummary) error {
	var cache *objectCache
	if cfg.Store != nil {
		cache = newObjectCache(cfg.Store, cfg.CacheBytes)
	}
	err := Results(ctx, c, run, cfg, func(it *rolloutv1.ResultItem) error {
		fi, ok := FinishedItem(it)
		if !ok {
			sum.Skipped++
			return nil
		}
		if err := resolve(ctx, cache, it, &fi); err != nil {
			return fmt.Errorf("item %d: %w", it.GetIndex(), err)
		}
		line, _, bad := batch.RenderLine(fi)
		if bad {
			sum.Unrenderable++
		}
		if fi.Done {
			sum.Done++
		} else {
			sum.Dead++
		}
		sum.Lines++
		_, err := w.Write(append(line, '\n'))
		return err
	})
	if err != nil {
		return err
	}
	return w.Commit()
}

// WriteDir writes the run's finished items into dir as batch.ResultsFile
// and batch.ErrorsFile (see batch.OutputDir), each atomically; items not
// finished yet are skipped and counted.
func WriteDir(ctx context.Context, c ResultsReader, run, dir string, cfg ResultsConfig) (DirSummary, error) {
	var sum DirSummary
	o, err := batch.CreateOutputDir(dir)
	if err != nil {
		return sum, err
	}
	defer o.Abort() // a no-op after Commit
	var cache *objectCache
	if cfg.Store != nil {
		cache = newObjectCache(cfg.Store, cfg.CacheBytes)
	}
	err = Results(ctx, c, run, cfg, func(it *rolloutv1.ResultItem) error {
		fi, ok := FinishedItem(it)
		if !ok {
			sum.Skipped++
			return nil
		}
		if err := resolve(ctx, cache, it, &fi); err != nil {
			return fmt.Errorf("item %d: %w", it.GetIndex(), err)
		}
		return o.Add(fi)
	})
	if err != nil {
		return sum, err
	}
	if err := o.Commit(); err != nil {
		return sum, err
	}
	sum.OutputSummary = o.Summary()
	return sum, nil
}

// FinishedItem converts a Done, Dead or Cancelled item for rendering
// (batch.RenderLine); ok is false for an item not finished yet. An id that
// is not 32 bytes is kept in fi.ID (the item then renders as an error
// line); a Dead item without a reason gets one saying so.
func FinishedItem(it *rolloutv1.ResultItem) (fi batch.FinishedItem, ok bool) {
	fi.ID = append([]byte{}, it.GetId()...) // never nil: an empty id is checked too
	copy(fi.SampleID[:], it.GetId())
	fi.Index, fi.Payload = it.GetIndex(), it.GetPayload()
	switch it.GetState() {
	case rolloutv1.ItemState_ITEM_STATE_DONE:
		fi.Done, fi.Result = true, it.GetResult()
	case rolloutv1.ItemState_ITEM_STATE_CANCELLED:
		fi.Reason = "the run was cancelled before this item ran"
	case rolloutv1.ItemState_ITEM_STATE_DEAD:
		fi.Reason = it.GetReason()
		if fi.Reason == "" {
			fi.Reason = deadNoReason
		}
	default:
		return fi, false
	}
	return fi, true
}
