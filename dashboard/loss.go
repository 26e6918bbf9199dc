package dashboard

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// ResultItem is an item of a run as TrainingLoss reads it: its index,
// whether it is finished (Done or Dead: it will not change) and its result
// (set when Done).
type ResultItem struct {
	Index    uint64
	Finished bool
	Result   []byte
	// Summary is the result's summary in the ledger, for an item whose
	// result lives in the run's object store (Result then empty).
	Summary []byte
}

// ResultPager reads up to limit items of run from index from on, in index
// order; next is where the next page starts, done is true when there are
// no more items. A replica's own ledger (a local read: the loss curve may
// lag the leader by what this replica has not applied yet) or the Results
// RPC can back it.
type ResultPager func(ctx context.Context, run string, from uint64, limit int) (items []ResultItem, next uint64, done bool, err error)

// StepDecoder turns a training run's item results (any order; empty ones
// skipped) into its finished steps' loss points, in step order; results
// that are not step results (initial weights, shards) yield none. The
// training front door's decoder (batch/train StepsFromResults) is one.
type StepDecoder func(results [][]byte) ([]LossPoint, error)

// lossPage is how many items TrainingLoss reads per page.
const lossPage = 64

// TrainingLoss returns a LossReader that reads each finished item of a run
// once: per run it keeps the index below which every item is finished and
// decoded, and the steps decoded so far, and each call reads from that
// index on (so a run's results cross the wire, or the ledger lock, about
// once, not at every sample). Items past the first unfinished one are
// decoded again on the next call, which is harmless: steps are keyed by
// number.
func TrainingLoss(page ResultPager, decode StepDecoder) LossReader {
	return TrainingLossSummaries(page, decode, nil)
}

// TrainingLossSummaries is TrainingLoss for runs whose results may live in
// an object store: the items' summaries (ResultItem.Summary) are decoded
// with decodeSummaries (batch/train StepsFromSummaries is one), their
// inline results with decode. The replicas never read the store.
func TrainingLossSummaries(page ResultPager, decode, decodeSummaries StepDecoder) LossReader {
	t := &lossTracker{page: page, decode: decode, decodeSummaries: decodeSummaries, runs: map[string]*runLoss{}}
	return t.read
}

type lossTracker struct {
	page            ResultPager
	decode          StepDecoder
	decodeSummaries StepDecoder

	mu   sync.Mutex
	runs map[string]*runLoss
}

type runLoss struct {
	from  uint64 // every item below is finished and decoded
	steps map[uint64]LossPoint
}

func (t *lossTracker) read(ctx context.Context, run string) ([]LossPoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rl := t.runs[run]
	if rl == nil {
		rl = &runLoss{steps: map[uint64]LossPoint{}}
		t.runs[run] = rl
	}
	from, contiguous := rl.from, true
	for {
		items, next, done, err := t.page(ctx, run, from, lossPage)
		if err != nil {
			return nil, fmt.Errorf("reading results of %q from index %d: %w", run, from, err)
		}
		var results, summaries [][]byte
		for _, it := range items {
			if !it.Finished {
				contiguous = false
				continue
			}
			if contiguous {
				rl.from = it.Index + 1
			}
			if len(it.Summary) > 0 && t.decodeSummaries != nil {
				summaries = append(summaries, it.Summary)
				continue
			}
			results = append(results, it.Result)
		}
		pts, err := t.decode(results)
		if err != nil {
			return nil, fmt.Errorf("decoding results of %q: %w", run, err)
		}
		if len(summaries) > 0 {
			more, err := t.decodeSummaries(summaries)
			if err != nil {
				return nil, fmt.Errorf("decoding result summaries of %q: %w", run, err)
			}
			pts = append(pts, more...)
		}
		for _, p := range pts {
			rl.steps[p.Step] = p
		}
		if done || len(items) == 0 || next <= from {
			break
		}
		from = next
	}
	out := make([]LossPoint, 0, len(rl.steps))
	for _, p := range rl.steps {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	if len(out) > maxLossPoints {
		for _, p := range out[:len(out)-maxLossPoints] {
			delete(rl.steps, p.Step)
		}
		out = out[len(out)-maxLossPoints:]
	}
	return out, nil
}
