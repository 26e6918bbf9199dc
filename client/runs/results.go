package runs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
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
	// cache of CacheBytes, DefaultCacheBytes when 0; a range run's objects
	// are read ahead of the lines written, at most CacheBytes of them held
	// at once).
	Store      *store.Store
	CacheBytes int64
	// Expected is how many lines the run's input has, when the caller
	// knows (the run's spec total, Target, or the lines of the input files
	// themselves): WriteFile and WriteDir count the lines beyond the items
	// the run holds as Missing.Unsubmitted. 0: only the items the run
	// holds are expected.
	Expected uint64
	// Model and Sampling are the run's, for a range run: its records hold
	// no sample ids, so each index's id is computed from its input line
	// (batch.SampleIDOfLine) and checked against the one its result object
	// holds (ErrSampleIDMismatch). Sampling nil: the run's sampling as the
	// ledger records it (RunCounters.sampling, read with RunStatus when the
	// reader has it, else the default sampling), and Model "" the run's
	// model likewise.
	Model    string
	Sampling *batch.SamplingParams

	// ahead, when set, counts what a range run's read-ahead read and held
	// (tests).
	ahead *aheadStats
}

// Results calls fn with every item of the run in index order, page by
// page, whatever its state; an error fn returns ends it with that error. It
// checks that the pages advance and stay in order (an error otherwise). A
// page too large for one message (RESOURCE_EXHAUSTED) is asked for again
// with half as many items. An unknown run is an error matching
// ErrRunNotFound; a failed call is a *CallError.
func Results(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig, fn func(*rolloutv1.ResultItem) error) error {
	return resultsFrom(ctx, c, run, 0, cfg, fn)
}

// resultsFrom is Results from the item index from on.
func resultsFrom(ctx context.Context, c ResultsReader, run string, from uint64, cfg ResultsConfig, fn func(*rolloutv1.ResultItem) error) error {
	pageSize := cfg.PageSize
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	timeout := orDefault(cfg.Timeout, DefaultTimeout)
	if timeout < 0 {
		return fmt.Errorf("%w: Timeout must not be negative, got %v", ErrInvalidConfig, timeout)
	}
	var lastIndex uint64
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

// Missing counts the lines of a run's input that a results walk could not
// write as their item's own output line (done or error), by why. An output
// with nothing missing has one line per line of the input.
type Missing struct {
	// Unsubmitted counts the input lines the run does not hold: the walk's
	// target (ResultsConfig.Expected) less the items it saw. An interrupted
	// submit leaves them; submitting the same input again adds them.
	Unsubmitted uint64
	// Pending and Running count the items not finished yet: no line is
	// written for them.
	Pending, Running uint64
	// Unreadable counts the finished items whose input or result object in
	// the store is missing or changed (its bytes fail their hash): each is
	// written as an error line naming the object, and counted here, not as
	// dead.
	Unreadable uint64
}

// Total is the number of missing lines.
func (m Missing) Total() uint64 { return m.Unsubmitted + m.Pending + m.Running + m.Unreadable }

// String is "" when nothing is missing, else e.g. "152000 lines missing:
// 152000 not yet submitted, 3 pending" (Reasons).
func (m Missing) String() string {
	if m.Total() == 0 {
		return ""
	}
	lines := "lines"
	if m.Total() == 1 {
		lines = "line"
	}
	return fmt.Sprintf("%d %s missing: %s", m.Total(), lines, m.Reasons())
}

// Reasons lists the non-zero counts by reason, e.g. "152000 not yet
// submitted, 3 pending, 1 running, 2 unreadable (...)".
func (m Missing) Reasons() string {
	var parts []string
	if m.Unsubmitted > 0 {
		parts = append(parts, fmt.Sprintf("%d not yet submitted", m.Unsubmitted))
	}
	if m.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", m.Pending))
	}
	if m.Running > 0 {
		parts = append(parts, fmt.Sprintf("%d running", m.Running))
	}
	if m.Unreadable > 0 {
		parts = append(parts, fmt.Sprintf("%d unreadable (input or result object missing or changed in the store)", m.Unreadable))
	}
	return strings.Join(parts, ", ")
}

// FileSummary counts what WriteFile wrote and what it could not.
type FileSummary struct {
	// Lines counts the lines written: Done, Dead, Cancelled and
	// Missing.Unreadable. Dead counts the items that failed, Cancelled
	// those that never ran because the run was cancelled.
	Lines, Done, Dead, Cancelled uint64
	// Skipped counts the items not finished yet (Missing.Pending +
	// Missing.Running).
	Skipped uint64
	// Unrenderable counts the items written as an error line because their
	// id, payload or result could not be rendered.
	Unrenderable uint64
	// Missing counts the input lines without their own output line.
	Missing Missing
}

// Complete reports whether every line of the run's input (as far as the
// walk's target knows it) has its output line.
func (s FileSummary) Complete() bool { return s.Missing.Total() == 0 }

func (s FileSummary) String() string {
	str := fmt.Sprintf("%d lines (%d done, %d dead", s.Lines, s.Done, s.Dead)
	if s.Cancelled > 0 {
		str += fmt.Sprintf(", %d cancelled", s.Cancelled)
	}
	if s.Missing.Unreadable > 0 {
		str += fmt.Sprintf(", %d unreadable", s.Missing.Unreadable)
	}
	str += ")"
	if s.Unrenderable > 0 {
		str += fmt.Sprintf("; %d item(s) could not be rendered (see their error lines)", s.Unrenderable)
	}
	if m := s.Missing.String(); m != "" {
		str += "; " + m
	}
	return str
}

// DirSummary counts what WriteDir wrote and what it could not. Its
// OutputSummary's Dead (failed) excludes Missing.Unreadable.
type DirSummary struct {
	batch.OutputSummary
	// Skipped counts the items not finished yet (Missing.Pending +
	// Missing.Running).
	Skipped uint64
	// Missing counts the input lines without their own output line.
	Missing Missing
}

// Complete reports whether every line of the run's input (as far as the
// walk's target knows it) has its output line.
func (s DirSummary) Complete() bool { return s.Missing.Total() == 0 }

func (s DirSummary) String() string {
	str := s.OutputSummary.String()
	if m := s.Missing.String(); m != "" {
		str += "; " + m
	}
	return str
}

// WriteFile pages through the run's items in index order (Results) and
// writes one line per Done or Dead item to path (batch.RenderLine; error
// lines of OpenAI Batch requests included), atomically: on any error no
// file (and no partial file) is left at path; a path that is a pipe or a
// device (or names standard output) is written in place instead (see
// batch.NewAtomicWriter). Items not finished yet are skipped and counted.
// An item whose id, payload or result cannot be rendered becomes an error
// line with the reason (batch.UnrenderableLine), one whose input or result
// object cannot be read an error line naming the object (counted as
// Missing.Unreadable), and the rest of the run is still written. The
// summary's Missing says which lines of the input the file lacks (see
// ResultsConfig.Expected); an incomplete output is not an error.
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

// walkFinished calls fn with every finished item of the run in index order,
// its bytes read from the store (resolve); unreadable says that fi is an
// error line standing in for an item whose bytes cannot be read. It counts
// into m what is missing: the unfinished items, the unreadable ones, and
// the lines of cfg.Expected beyond the items seen.
func walkFinished(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig, m *Missing,
	fn func(fi batch.FinishedItem, unreadable bool) error) error {
	var cache *objectCache
	if cfg.Store != nil {
		cache = newObjectCache(cfg.Store, cfg.CacheBytes)
	}
	var seen uint64
	var ranges *rangeWalk
	var ahead *aheadWalk
	err := Results(ctx, c, run, cfg, func(it *rolloutv1.ResultItem) error {
		if ranges == nil && seen == 0 && isRangeRecord(it) {
			// A range run: its records are rendered index by index, their
			// objects read ahead (aheadWalk) within CacheBytes.
			if cfg.Store == nil {
				return fmt.Errorf("item %d: %w", it.GetIndex(), errNoStore)
			}
			model, sp, err := rangeParams(ctx, c, run, cfg)
			if err != nil {
				return err
			}
			ranges = newRangeWalk(cfg.Store, model, sp, m, fn)
			ahead = newAheadWalk(ctx, ranges, cfg.CacheBytes, cfg.ahead)
		}
		if ahead != nil {
			return ahead.add(it)
		}
		seen++
		fi, ok := FinishedItem(it)
		if !ok {
			if it.GetState() == rolloutv1.ItemState_ITEM_STATE_RUNNING {
				m.Running++
			} else {
				m.Pending++
			}
			return nil
		}
		unreadable, err := resolve(ctx, cache, it, &fi)
		if err != nil {
			return fmt.Errorf("item %d: %w", it.GetIndex(), err)
		}
		if unreadable {
			m.Unreadable++
		}
		return fn(fi, unreadable)
	})
	if ahead != nil {
		err = ahead.finish(err)
		seen = ranges.seen
	}
	if err != nil {
		return err
	}
	if cfg.Expected > seen {
		m.Unsubmitted = cfg.Expected - seen
	}
	return nil
}

// renderBatch is how many finished items writeLines renders together on
// one of its renderers.
const renderBatch = 512

// toRender is one finished item waiting for its line.
type toRender struct {
	fi         batch.FinishedItem
	unreadable bool
}

// renderedBatch is a batch's lines and counts.
type renderedBatch struct {
	buf                                        []byte
	lines, done, dead, cancelled, unrenderable uint64
}

// renderAll renders the lines of items (batch.AppendRenderLine), each
// ended by a newline, into one buffer sized for them.
func renderAll(items []toRender) renderedBatch {
	var r renderedBatch
	size := 0
	for _, it := range items {
		// An output line holds its input's members, its result's and
		// about 100 bytes more (its sample id, the keys).
		size += len(it.fi.Payload) + len(it.fi.Result) + len(it.fi.Reason) + 128
	}
	r.buf = make([]byte, 0, size)
	for _, it := range items {
		var bad bool
		r.buf, _, bad = batch.AppendRenderLine(r.buf, it.fi)
		if bad {
			r.unrenderable++
		}
		switch {
		case it.unreadable:
		case it.fi.Done:
			r.done++
		case it.fi.Cancelled:
			r.cancelled++
		default:
			r.dead++
		}
		r.lines++
		r.buf = append(r.buf, '\n')
	}
	return r
}

// writeLines walks the run's finished items (walkFinished) and writes
// their lines in index order. Rendering (parsing each input line and
// result, building its output line) is most of the work: batches of
// renderBatch items are rendered on up to GOMAXPROCS goroutines while the
// walk goes on, and written in their order by one writer, with at most
// GOMAXPROCS+1 batches in memory. A write error stops the walk.
func writeLines(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig, w interface {
	Write([]byte) (int, error)
	Commit() error
}, sum *FileSummary) error {
	queue := make(chan chan renderedBatch, runtime.GOMAXPROCS(0))
	failed := make(chan struct{}) // closed when a write fails: werr is set
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for fut := range queue {
			r := <-fut
			if werr != nil {
				continue
			}
			if _, err := w.Write(r.buf); err != nil {
				werr = err
				close(failed)
				continue
			}
			sum.Lines += r.lines
			sum.Done += r.done
			sum.Dead += r.dead
			sum.Cancelled += r.cancelled
			sum.Unrenderable += r.unrenderable
		}
	}()
	var pending []toRender
	dispatch := func() error {
		if len(pending) == 0 {
			return nil
		}
		items := pending
		pending = make([]toRender, 0, renderBatch)
		fut := make(chan renderedBatch, 1)
		select {
		case queue <- fut:
		case <-failed:
			return errWriteFailed
		}
		go func() { fut <- renderAll(items) }()
		return nil
	}
	err := walkFinished(ctx, c, run, cfg, &sum.Missing, func(fi batch.FinishedItem, unreadable bool) error {
		pending = append(pending, toRender{fi: fi, unreadable: unreadable})
		if len(pending) < renderBatch {
			return nil
		}
		return dispatch()
	})
	if err == nil {
		err = dispatch()
	}
	close(queue)
	<-written
	sum.Skipped = sum.Missing.Pending + sum.Missing.Running
	if werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	return w.Commit()
}

// errWriteFailed stops a walk whose output could not be written (the
// write's own error is returned instead).
var errWriteFailed = errors.New("writing the output failed")

// WriteDir writes the run's finished items into dir as batch.ResultsFile
// and batch.ErrorsFile (see batch.OutputDir), each atomically (in place
// when it is a pipe or a device); items not finished yet are skipped, and
// everything missing is counted as WriteFile counts it.
func WriteDir(ctx context.Context, c ResultsReader, run, dir string, cfg ResultsConfig) (DirSummary, error) {
	var sum DirSummary
	o, err := batch.CreateOutputDir(dir)
	if err != nil {
		return sum, err
	}
	defer o.Abort() // a no-op after Commit
	err = walkFinished(ctx, c, run, cfg, &sum.Missing, func(fi batch.FinishedItem, _ bool) error {
		return o.Add(fi)
	})
	sum.Skipped = sum.Missing.Pending + sum.Missing.Running
	if err != nil {
		return sum, err
	}
	if err := o.Commit(); err != nil {
		return sum, err
	}
	sum.OutputSummary = o.Summary()
	// The unreadable items were written as failed lines; they are counted
	// as missing, not as failed.
	sum.Dead -= min(sum.Dead, sum.Missing.Unreadable)
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
		fi.Reason, fi.Cancelled = "the run was cancelled before this item ran", true
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
