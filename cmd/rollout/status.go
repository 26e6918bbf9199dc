package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
)

func (a *app) statusCmd() *cobra.Command {
	var coords []string
	var run, configPath string
	var watch bool
	interval := defaultPollInterval
	cmd := &cobra.Command{
		Use:   "status --coord H:P[,...] [--run NAME | --config RUN.toml] [--watch]",
		Short: "Show runs (counters) and workers (backlog, rate, liveness); --watch follows a run's progress",
		Long: "status prints the runs' counters and the workers. With --watch it follows one run until it\n" +
			"finishes: done/failed/total, items/s and ETA, as a live progress bar on a terminal and as a\n" +
			"plain line whenever progress changed (at most every --interval) otherwise; then the table.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&run, "run", "", "show only this run")
	cmd.Flags().StringVar(&configPath, "config", "", "TOML run config: show the run it names")
	cmd.Flags().BoolVar(&watch, "watch", false, "follow the run's progress until it finishes (needs --run or --config)")
	cmd.Flags().DurationVar(&interval, "interval", interval, "with --watch: how often to poll progress")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if configPath != "" && !cmd.Flags().Changed("run") {
			rc, err := loadRunConfig(configPath)
			if err != nil {
				return err
			}
			run = rc.Name
		}
		if cmd.Flags().Changed("run") || configPath != "" {
			if err := checkRunName(run); err != nil {
				return err
			}
		}
		if watch && run == "" {
			return usagef("--watch needs --run NAME or --config RUN.toml")
		}
		if watch && interval <= 0 {
			return usagef("--interval must be positive, got %v", interval)
		}
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		if watch {
			pr := newProgressPrinter(a.stdout, a.tty, interval)
			if _, err := waitRun(ctx, c, run, a.timeout, interval, pr); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout)
		}
		var resp *rolloutv1.RunStatusResponse
		if run != "" {
			resp, _, err = runs.Status(ctx, c, run, a.timeout)
			if err != nil {
				return err
			}
		} else {
			cctx, cancel := context.WithTimeout(ctx, a.timeout)
			defer cancel()
			resp, err = c.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
			if err != nil {
				return a.rpcError("reading status", a.timeout, err)
			}
		}
		printStatus(a.stdout, resp, run, trainingStatus(ctx, c, resp, run, a.timeout))
		return nil
	})
	return cmd
}

// printStatus writes the runs table (only run, when not empty), the
// training runs' progress (trains, by run name) and the workers table.
func printStatus(w io.Writer, resp *rolloutv1.RunStatusResponse, run string, trains map[string]trainStatus) {
	h := resp.GetHeader()
	leader := h.GetLeaderId()
	if leader == "" {
		leader = h.GetReplicaId()
	}
	fmt.Fprintf(w, "leader %s, term %d\n\n", orDash(leader), h.GetTerm())

	now := time.UnixMilli(resp.GetNowUnixMs())
	if resp.GetNowUnixMs() == 0 {
		now = time.Now()
	}
	var shown []*rolloutv1.RunCounters
	for _, rc := range resp.GetRuns() {
		if run == "" || rc.GetName() == run {
			shown = append(shown, rc)
		}
	}
	if len(shown) == 0 {
		fmt.Fprintln(w, "no runs")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		// Runs of another kind than batch inference add KIND and BLOCKED
		// (pending items waiting on a dependency).
		kinds := false
		for _, rc := range shown {
			kinds = kinds || rc.GetKind() != "" || rc.GetBlocked() > 0
		}
		// RANGES (the records the ledger holds for a run made of ranges)
		// appears when a shown run is one.
		ranged := false
		for _, rc := range shown {
			ranged = ranged || rc.GetRanges() > 0
		}
		// RUNNING splits into on time / running long / owner lost.
		// TENANT owns the run, PRI is its priority (1 lowest, 5 highest)
		// and SHARE its part of every item running now.
		head := "RUN\tTENANT\tPRI\tSHARE\tTOTAL\tPENDING\tRUNNING\t(ON TIME\tLONG\tOWNER LOST)\tDONE\tDEAD\tFAILURES"
		if kinds {
			head = "RUN\tTENANT\tPRI\tSHARE\tKIND\tTOTAL\tPENDING\t(BLOCKED)\tRUNNING\t(ON TIME\tLONG\tOWNER LOST)\tDONE\tDEAD\tFAILURES"
		}
		if ranged {
			head += "\tRANGES"
		}
		// CLUSTER is where the run runs: local, or the peer it was handed
		// to (federation).
		fmt.Fprintln(tw, head+"\tCLUSTER\tSTATE")
		for _, rc := range shown {
			onTime := rc.GetRunning() - min(rc.GetRunning(), rc.GetRunningLong()+rc.GetOwnerLost())
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", rc.GetName(), orDash(rc.GetTenant()), priorityName(rc.GetPriority()), shareName(rc.GetShare()))
			if kinds {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d", kindName(rc.GetKind()), runs.Target(rc),
					rc.GetPending(), rc.GetBlocked(), rc.GetRunning(), onTime, rc.GetRunningLong(), rc.GetOwnerLost(), rc.GetDone(), rc.GetDead(),
					rc.GetFailures())
			} else {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d", runs.Target(rc), rc.GetPending(),
					rc.GetRunning(), onTime, rc.GetRunningLong(), rc.GetOwnerLost(), rc.GetDone(), rc.GetDead(), rc.GetFailures())
			}
			if ranged {
				if rc.GetRanges() > 0 {
					fmt.Fprintf(tw, "\t%d", rc.GetRanges())
				} else {
					fmt.Fprint(tw, "\t-")
				}
			}
			fmt.Fprintf(tw, "\t%s\t%s\n", clusterName(rc), runState(rc, now))
		}
		_ = tw.Flush()
		for _, rc := range shown {
			if run != "" && rc.GetRemoteRun() != "" {
				fmt.Fprintf(w, "run %s runs on cluster %s as %s\n", rc.GetName(), clusterName(rc), rc.GetRemoteRun())
			}
		}
		printTrainingStatus(w, shown, trains)
	}
	fmt.Fprintln(w)

	workers := append([]*rolloutv1.WorkerStatus(nil), resp.GetWorkers()...)
	sort.Slice(workers, func(i, j int) bool { return workers[i].GetId() < workers[j].GetId() })
	if len(workers) == 0 {
		fmt.Fprintln(w, "no workers")
		return
	}
	// MODELS appears when a worker names the models it serves.
	models := false
	for _, ws := range workers {
		models = models || len(ws.GetModels()) > 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if models {
		fmt.Fprintln(tw, "WORKER\tKINDS\tMODELS\tRUNNING\t(ON TIME\tLONG\tOWNER LOST)\tBACKLOG\tRATE/S\tCOMPLETED\tLAST HEARTBEAT\tLOST")
	} else {
		fmt.Fprintln(tw, "WORKER\tKINDS\tRUNNING\t(ON TIME\tLONG\tOWNER LOST)\tBACKLOG\tRATE/S\tCOMPLETED\tLAST HEARTBEAT\tLOST")
	}
	for _, ws := range workers {
		onTime := ws.GetRunning() - min(ws.GetRunning(), ws.GetRunningLong()+ws.GetOwnerLost())
		age := "-"
		if ms := ws.GetLastHeartbeatUnixMs(); ms > 0 {
			age = batch.FormatDuration(now.Sub(time.UnixMilli(ms))) + " ago"
		}
		lost := "no"
		if ws.GetLost() {
			lost = "yes"
		}
		kinds := "any"
		if len(ws.GetKinds()) > 0 {
			kinds = strings.Join(ws.GetKinds(), ",")
		}
		if models {
			kinds += "\t" + modelsName(ws.GetModels())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%d\t%s\t%s\n", ws.GetId(), kinds, ws.GetRunning(), onTime,
			ws.GetRunningLong(), ws.GetOwnerLost(), ws.GetBacklog(), ws.GetItemsPerSec(), ws.GetCompleted(), age, lost)
	}
	_ = tw.Flush()
}

// modelsName names a worker's models in the workers table ("any": every
// model).
func modelsName(models []string) string {
	if len(models) == 0 {
		return "any"
	}
	return strings.Join(models, ",")
}

// runState summarises a run: finished (with its duration), running,
// waiting for a worker that serves its model (RunCounters.unserved_model)
// or waiting for items.
func runState(rc *rolloutv1.RunCounters, now time.Time) string {
	if s, ok := handleState(rc); ok {
		return s
	}
	switch {
	case rc.GetCancelled() && rc.GetRunning() > 0:
		return fmt.Sprintf("cancelled (%d cancelled, %d still running)", rc.GetCancelledItems(), rc.GetRunning())
	case rc.GetCancelled():
		return fmt.Sprintf("cancelled (%d cancelled, %d done)", rc.GetCancelledItems(), rc.GetDone())
	case runs.Finished(rc):
		if c, f := rc.GetCreatedUnixMs(), rc.GetFinishedUnixMs(); c > 0 && f >= c {
			return "finished in " + batch.FormatDuration(time.Duration(f-c)*time.Millisecond)
		}
		return "finished"
	case rc.GetStall() != nil:
		return stallState(rc.GetStall(), now)
	case rc.GetUnservedModel():
		return "waiting: no live worker serves model " + rc.GetModel()
	case rc.GetTotal() < rc.GetExpectedTotal() && rc.GetPending()+rc.GetRunning() == 0:
		return "waiting for items"
	}
	if c := rc.GetCreatedUnixMs(); c > 0 {
		return "running for " + batch.FormatDuration(now.Sub(time.UnixMilli(c)))
	}
	return "running"
}

// clusterName is the CLUSTER of a run: "local", or the peer cluster it was
// handed to ("local" too from a replica that predates federation).
func clusterName(rc *rolloutv1.RunCounters) string {
	if c := rc.GetCluster(); c != "" {
		return c
	}
	return localCluster
}

// handleState describes a run handed to a peer cluster whose handle says
// more than its counters can: not yet accepted by the peer (pending), or
// refused by it, or lost there; ok is false otherwise (the counters, the
// peer's, say it, as for a local run).
func handleState(rc *rolloutv1.RunCounters) (string, bool) {
	peer := clusterName(rc)
	reason := ""
	if r := rc.GetHandleReason(); r != "" {
		reason = ": " + r
	}
	switch rc.GetHandleState() {
	case "pending":
		return "handing off to " + peer + reason, true
	case "refused":
		return "refused by " + peer + reason, true
	case "lost":
		return "lost: " + peer + " no longer has it" + reason, true
	}
	return "", false
}

// stallState describes a stalled run: the input object its workers could
// not read and since when (leader-stamped), e.g. "stalled: input object
// runs/r/inputs/ab12 missing (since 2030-01-02T03:04:05Z, 1m05s ago)"; or
// a run isolated because its store cannot be reached, with the last
// error, e.g. "store unreachable since 2030-01-02T03:04:05Z (1m05s ago):
// ... connection refused".
func stallState(s *rolloutv1.RunStall, now time.Time) string {
	if s.GetStoreUnreachable() {
		out := "store unreachable"
		if ms := s.GetSinceUnixMs(); ms > 0 {
			since := time.UnixMilli(ms)
			out += fmt.Sprintf(" since %s (%s ago)", since.UTC().Format(time.RFC3339), batch.FormatDuration(max(now.Sub(since), 0)))
		}
		if r := s.GetReason(); r != "" {
			out += ": " + r
		}
		return out
	}
	what := "missing"
	if r := s.GetReason(); r != "" && !strings.Contains(r, "not found") {
		what = "missing or changed"
	}
	out := fmt.Sprintf("stalled: input object %s %s", s.GetObject(), what)
	if ms := s.GetSinceUnixMs(); ms > 0 {
		since := time.UnixMilli(ms)
		out += fmt.Sprintf(" (since %s, %s ago)", since.UTC().Format(time.RFC3339), batch.FormatDuration(max(now.Sub(since), 0)))
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// priorityName shows a run's priority ("-" from a coordinator that sends
// none).
func priorityName(p uint32) string {
	if p == 0 {
		return "-"
	}
	return fmt.Sprint(p)
}

// shareName shows a share of the fleet as a percentage ("-" for none).
func shareName(f float64) string {
	if f <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}
