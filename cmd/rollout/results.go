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
	var run, out, configPath string
	pageSize := uint32(defaultPageSize)
	cmd := &cobra.Command{
		Use:   "results --coord H:P[,...] (--config RUN.toml | --run NAME -o OUT.jsonl)",
		Short: "Write a run's results in input order (also while it is still running)",
		Long: "results writes one line per finished item, in input order (input files in glob order, then\n" +
			"line order). A {\"prompt\"} line gives the input object's members verbatim, then \"completion\" and\n" +
			"\"finish_reason\" (or \"error\" for a failed item) and \"sample_id\". An OpenAI Batch line gives an\n" +
			"OpenAI Batch output line {\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\",\n" +
			"\"body\"}, \"error\"}.\n\n" +
			"With --config the files go to the config's [output] dir: results.jsonl, and errors.jsonl with\n" +
			"the OpenAI Batch lines that failed; -o writes every line to one file instead. Items not\n" +
			"finished yet are skipped and counted, so results may be written while the run goes on.\n" +
			"Files are written atomically (a temporary file renamed into place): a crash never leaves a\n" +
			"truncated file.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&configPath, "config", "", "TOML run config: the run (its name) and the output directory")
	cmd.Flags().StringVar(&run, "run", "", "run name (required without --config; overrides the config's name)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output JSONL file (required without --config)")
	cmd.Flags().Uint32Var(&pageSize, "page-size", pageSize, "items per Results call")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		var rc *batch.RunConfig
		if configPath != "" {
			var err error
			if rc, err = loadRunConfig(configPath); err != nil {
				return err
			}
			if !cmd.Flags().Changed("run") {
				run = rc.Name
			}
		} else if !cmd.Flags().Changed("run") || !cmd.Flags().Changed("output") {
			return usagef("results needs --config RUN.toml, or --run NAME with -o OUT.jsonl")
		}
		if err := checkRunName(run); err != nil {
			return err
		}
		if cmd.Flags().Changed("output") && out == "" {
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
		if out == "" {
			sum, err := writeOutputDir(ctx, c, run, rc.OutputDir, pageSize, a.timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
			return nil
		}
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
	// Unrenderable counts the items written as an error line because their
	// id, payload or result could not be rendered.
	Unrenderable uint64
}

func (s resultsSummary) String() string {
	str := fmt.Sprintf("%d lines (%d done, %d dead)", s.Lines, s.Done, s.Dead)
	if s.Unrenderable > 0 {
		str += fmt.Sprintf("; %d item(s) could not be rendered (see their error lines)", s.Unrenderable)
	}
	if s.Skipped > 0 {
		str += fmt.Sprintf("; %d items not finished yet were skipped", s.Skipped)
	}
	return str
}

// dirSummary counts what writeOutputDir wrote and skipped.
type dirSummary struct {
	batch.OutputSummary
	Skipped uint64
}

func (s dirSummary) String() string {
	str := s.OutputSummary.String()
	if s.Skipped > 0 {
		str += fmt.Sprintf("; %d items not finished yet were skipped (partial results)", s.Skipped)
	}
	return str
}

// fetchResults pages through the run's items in index order and writes one
// line per Done or Dead item to path (batch.RenderLine; error lines of
// OpenAI Batch requests included), atomically: on any error no file (and no
// partial file) is left at path. An item whose id, payload or result cannot
// be rendered becomes an error line with the reason (batch.UnrenderableLine)
// and the rest of the run is still written.
func fetchResults(ctx context.Context, c coordinator, run, path string, pageSize uint32, timeout time.Duration) (resultsSummary, error) {
	var sum resultsSummary
	w, err := batch.NewAtomicWriter(path, 0o644)
	if err != nil {
		return sum, err
	}
	defer w.Abort() // a no-op after Commit
	err = pageResults(ctx, c, run, pageSize, timeout, func(it *rolloutv1.ResultItem) error {
		fi, ok := finishedItem(it)
		if !ok {
			sum.Skipped++
			return nil
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
		_, err = w.Write(append(line, '\n'))
		return err
	})
	if err != nil {
		return sum, err
	}
	return sum, w.Commit()
}

// writeOutputDir writes the run's finished items into dir as
// batch.ResultsFile and batch.ErrorsFile (see batch.OutputDir), each
// atomically.
func writeOutputDir(ctx context.Context, c coordinator, run, dir string, pageSize uint32, timeout time.Duration) (dirSummary, error) {
	var sum dirSummary
	o, err := batch.CreateOutputDir(dir)
	if err != nil {
		return sum, err
	}
	defer o.Abort() // a no-op after Commit
	err = pageResults(ctx, c, run, pageSize, timeout, func(it *rolloutv1.ResultItem) error {
		fi, ok := finishedItem(it)
		if !ok {
			sum.Skipped++
			return nil
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

// pageResults calls fn with every item of the run in index order, checking
// that pages advance and stay in order. A page too large for one message
// (RESOURCE_EXHAUSTED) is asked for again with half as many items.
func pageResults(ctx context.Context, c coordinator, run string, pageSize uint32, timeout time.Duration, fn func(*rolloutv1.ResultItem) error) error {
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
			return fmt.Errorf("run %q not found", run)
		}
		if err != nil {
			return rpcError(fmt.Sprintf("reading results from index %d", from), timeout, err)
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

// finishedItem converts a Done or Dead item; ok is false for an item not
// finished yet. An id that is not 32 bytes is kept in fi.ID (the item then
// renders as an error line).
func finishedItem(it *rolloutv1.ResultItem) (fi batch.FinishedItem, ok bool) {
	fi.ID = append([]byte{}, it.GetId()...) // never nil: an empty id is checked too
	copy(fi.SampleID[:], it.GetId())
	fi.Index, fi.Payload = it.GetIndex(), it.GetPayload()
	switch it.GetState() {
	case rolloutv1.ItemState_ITEM_STATE_DONE:
		fi.Done, fi.Result = true, it.GetResult()
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
