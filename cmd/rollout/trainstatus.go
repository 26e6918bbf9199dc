package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/runs"
)

// trainStatus is what status shows of a training run beyond its counters.
type trainStatus struct {
	shape     runs.TrainShape
	completed int
	// last is the newest finished step (nil before the first); err says
	// why the run's progress could not be read.
	last *runs.StepResult
	err  error
}

// kindName names a run kind in the status table.
func kindName(kind string) string {
	if kind == "" {
		return "batch"
	}
	return kind
}

// trainingStatus reads, for every training run of resp (only run, when not
// empty), its layout and its newest finished step: two one-item reads per
// run (runs.DiscoverTrainShape, runs.ReadStep). A failed read is kept in
// the run's entry and shown, not returned.
func trainingStatus(ctx context.Context, c coordinator, resp *rolloutv1.RunStatusResponse, run string, timeout time.Duration) map[string]trainStatus {
	out := map[string]trainStatus{}
	for _, rc := range resp.GetRuns() {
		if rc.GetKind() != train.Kind || (run != "" && rc.GetName() != run) {
			continue
		}
		var ts trainStatus
		ts.shape, ts.err = runs.DiscoverTrainShape(ctx, c, rc, timeout)
		if ts.err == nil {
			ts.completed = ts.shape.Completed(rc.GetDone())
			if ts.completed > 0 {
				st, ok, err := runs.ReadStep(ctx, c, rc.GetName(), ts.shape, ts.completed, timeout)
				if ok {
					ts.last = &st
				}
				ts.err = err
			}
		}
		out[rc.GetName()] = ts
	}
	return out
}

// printTrainingStatus writes a table of the training runs among shown:
// step k of N, blocked items, and the newest step's batch loss and
// accuracy (and held-out ones, on a checkpoint step).
func printTrainingStatus(w io.Writer, shown []*rolloutv1.RunCounters, trains map[string]trainStatus) {
	if len(trains) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRAINING RUN\tSTEP\tSHARDS\tBLOCKED\tLOSS\tACCURACY\tHELD-OUT ACCURACY\tWEIGHTS")
	for _, rc := range shown {
		ts, ok := trains[rc.GetName()]
		if !ok {
			continue
		}
		if ts.err != nil && ts.last == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t%d\t-\t-\t-\t(%v)\n", rc.GetName(), rc.GetBlocked(), ts.err)
			continue
		}
		loss, acc, heldOut, weights := "-", "-", "-", "-"
		if st := ts.last; st != nil {
			loss, acc = fmt.Sprintf("%.4f", st.Train.Loss), fmt.Sprintf("%.4f", st.Train.Accuracy)
			if st.Eval != nil {
				heldOut = fmt.Sprintf("%.4f", st.Eval.Accuracy)
			}
			weights = short(st.Blake3)
		}
		fmt.Fprintf(tw, "%s\t%d of %d\t%d\t%d\t%s\t%s\t%s\t%s\n", rc.GetName(), ts.completed, ts.shape.Steps, ts.shape.Shards,
			rc.GetBlocked(), loss, acc, heldOut, weights)
	}
	_ = tw.Flush()
}
