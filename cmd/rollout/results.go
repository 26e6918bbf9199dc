package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
)

// defaultPageSize is how many items one Results call asks for.
const defaultPageSize = 500

// deadNoReason stands in for a dead item's reason when the ledger kept none.
const deadNoReason = "item is dead (no reason recorded)"

func (a *app) resultsCmd() *cobra.Command {
	var coords []string
	var run, out string
	pageSize := uint32(defaultPageSize)
	cmd := &cobra.Command{
		Use:   "results --coord H:P[,...] --run NAME -o OUT.jsonl",
		Short: "Write a run's results, one line per item in input order",
		Long: "results writes one line per finished item, in input order: the input object's fields\n" +
			"verbatim, then \"completion\" and \"finish_reason\" (or \"error\" for a dead item) and\n" +
			"\"sample_id\". The file is written atomically. Items not finished yet are skipped and counted.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&run, "run", "", "run name (required)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output JSONL file (required)")
	cmd.Flags().Uint32Var(&pageSize, "page-size", pageSize, "items per Results call")
	_ = cmd.MarkFlagRequired("run")
	_ = cmd.MarkFlagRequired("output")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := checkRunName(run); err != nil {
			return err
		}
		if out == "" {
			return usagef("-o must name the output file")
		}
		if pageSize == 0 {
			return usagef("--page-size must be positive")
		}
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		sum, err := fetchResults(ctx, c, run, out, pageSize, a.timeout)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "wrote %s: %s\n", out, sum)
		return nil
	})
	return cmd
}

// resultsSummary counts what fetchResults wrote and skipped.
type resultsSummary struct {
	Lines, Done, Dead, Skipped uint64
}

func (s resultsSummary) String() string {
	str := fmt.Sprintf("%d lines (%d done, %d dead)", s.Lines, s.Done, s.Dead)
	if s.Skipped > 0 {
		str += fmt.Sprintf("; %d items not finished yet were skipped", s.Skipped)
	}
	return str
}

// fetchResults pages through the run's items in index order and writes one
// line per Done or Dead item to path, atomically: on any error no file (and
// no partial file) is left at path. A page too large for one message
// (RESOURCE_EXHAUSTED) is asked for again with half as many items.
func fetchResults(ctx context.Context, c coordinator, run, path string, pageSize uint32, timeout time.Duration) (resultsSummary, error) {
	var sum resultsSummary
	w, err := batch.NewAtomicWriter(path, 0o644)
	if err != nil {
		return sum, err
	}
	defer w.Abort() // a no-op after Commit

	var from uint64
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
			return sum, fmt.Errorf("run %q not found", run)
		}
		if err != nil {
			return sum, rpcError(fmt.Sprintf("reading results from index %d", from), timeout, err)
		}
		for _, it := range resp.GetItems() {
			if !first && it.GetIndex() <= lastIndex {
				return sum, fmt.Errorf("coordinator returned item index %d after %d: results out of order", it.GetIndex(), lastIndex)
			}
			if it.GetIndex() < from {
				return sum, fmt.Errorf("coordinator returned item index %d for a page starting at %d", it.GetIndex(), from)
			}
			first, lastIndex = false, it.GetIndex()
			line, err := resultLine(it)
			if err != nil {
				return sum, err
			}
			switch {
			case line == nil:
				sum.Skipped++
				continue
			case it.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE:
				sum.Done++
			default:
				sum.Dead++
			}
			sum.Lines++
			if _, err := w.Write(append(line, '\n')); err != nil {
				return sum, err
			}
		}
		if resp.GetDone() {
			break
		}
		next := resp.GetNextIndex()
		if next <= from || (!first && next <= lastIndex) {
			return sum, fmt.Errorf("coordinator's results page did not advance (from %d, next %d)", from, next)
		}
		from = next
	}
	if err := w.Commit(); err != nil {
		return sum, err
	}
	return sum, nil
}

// resultLine is the output line of a Done or Dead item, or nil for an item
// not finished yet.
func resultLine(it *rolloutv1.ResultItem) ([]byte, error) {
	var id [32]byte
	if len(it.GetId()) != len(id) {
		return nil, fmt.Errorf("item %d has a %d-byte id, want %d", it.GetIndex(), len(it.GetId()), len(id))
	}
	copy(id[:], it.GetId())
	var line []byte
	var err error
	switch it.GetState() {
	case rolloutv1.ItemState_ITEM_STATE_DONE:
		line, err = batch.MergeResult(it.GetPayload(), id, it.GetResult(), "")
	case rolloutv1.ItemState_ITEM_STATE_DEAD:
		reason := it.GetReason()
		if reason == "" {
			reason = deadNoReason
		}
		line, err = batch.MergeResult(it.GetPayload(), id, nil, reason)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("item %d: %w", it.GetIndex(), err)
	}
	return line, nil
}
