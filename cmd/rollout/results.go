package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/runs"
)

func (a *app) resultsCmd() *cobra.Command {
	var coords []string
	var run, out, configPath, weightsOut string
	pageSize := uint32(runs.DefaultPageSize)
	cmd := &cobra.Command{
		Use:   "results --coord H:P[,...] (--config RUN.toml | --run NAME -o OUT.jsonl | --run NAME [--weights-out FILE])",
		Short: "Write a run's results in input order (also while it is still running); a training run's steps",
		Long: "results writes one line per finished item, in input order (input files in glob order, then\n" +
			"line order). A {\"prompt\"} line gives the input object's members verbatim, then \"completion\" and\n" +
			"\"finish_reason\" (or \"error\" for a failed item) and \"sample_id\". An OpenAI Batch line gives an\n" +
			"OpenAI Batch output line {\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\",\n" +
			"\"body\"}, \"error\"}.\n\n" +
			"With --config the files go to the config's [output] dir: results.jsonl, and errors.jsonl with\n" +
			"the OpenAI Batch lines that failed; -o writes every line to one file instead. Items not\n" +
			"finished yet are skipped and counted, so results may be written while the run goes on.\n" +
			"Files are written atomically (a temporary file renamed into place): a crash never leaves a\n" +
			"truncated file. A pipe, a device or /dev/stdout is written in place (-o /dev/stdout: the\n" +
			"summary goes to stderr).\n\n" +
			"Exit status: 0 when every line of the run's input has its output line (done or error); 3 when\n" +
			"the output was written but lines are missing: not yet submitted (the input has more lines than\n" +
			"the run holds: an interrupted submit; with --config the input files are counted), pending,\n" +
			"running, or unreadable (an input or result object missing or changed in the store: written as\n" +
			"an error line, counted as missing); stderr counts them by reason. 1 failure, 2 bad usage.\n\n" +
			"For a training run (rollout train; --run NAME or --config TRAIN.toml) it prints one line per\n" +
			"finished step: the batch loss and accuracy at the step's input weights, the held-out loss and\n" +
			"accuracy on checkpoint steps, and the blake3 of the step's output weights; -o writes the steps\n" +
			"as JSON lines instead, and --weights-out FILE writes the newest weights (little-endian float32).",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&configPath, "config", "", "TOML run config (the run and the output directory) or training config (the run)")
	cmd.Flags().StringVar(&run, "run", "", "run name (required without --config; overrides the config's name)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output JSONL file (required without --config, except for a training run)")
	cmd.Flags().StringVar(&weightsOut, "weights-out", "", "training runs: write the newest weights (little-endian float32) to FILE")
	cmd.Flags().Uint32Var(&pageSize, "page-size", pageSize, "items per Results call")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		var rc *batch.RunConfig
		if configPath != "" {
			var err error
			var name string
			if rc, name, err = loadAnyConfig(configPath); err != nil {
				return err
			}
			if !cmd.Flags().Changed("run") {
				run = name
			}
		} else if !cmd.Flags().Changed("run") {
			return usagef("results needs --config RUN.toml, or --run NAME with -o OUT.jsonl (a training run needs only --run)")
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
		rcfg := runs.ResultsConfig{PageSize: pageSize, Timeout: a.timeout}
		_, counters, err := runs.Status(ctx, c, run, a.timeout)
		if err != nil {
			return err
		}
		st, err := openRunStore(ctx, counters)
		if err != nil {
			return err
		}
		if st != nil {
			defer st.Close()
			rcfg.Store = st
		}
		if counters.GetKind() == train.Kind {
			var rr coordinator = c
			if st != nil {
				rr = runs.WithStore(c, st, 0)
			}
			return trainResults(ctx, rr, a.stdout, run, out, weightsOut, rcfg)
		}
		switch {
		case weightsOut != "":
			return usagef("--weights-out is for training runs; run %q is of kind %s", run, kindName(counters.GetKind()))
		case out == "" && rc == nil:
			return usagef("results needs --config RUN.toml, or --run NAME with -o OUT.jsonl (a training run needs only --run)")
		}
		rcfg.Expected = a.expectedLines(ctx, rc, counters)
		// A range run's sample ids are computed from its input lines with
		// the run's model and sampling: the config's, else the ones the
		// ledger records for the run.
		if rc != nil {
			sp := rc.Sampling
			rcfg.Model, rcfg.Sampling = rc.Model, &sp
		} else {
			sp, err := batch.ParseSamplingJSON(counters.GetSampling())
			if err != nil {
				return fmt.Errorf("run %q: the sampling the ledger records cannot be read: %w", run, err)
			}
			rcfg.Model, rcfg.Sampling = counters.GetModel(), &sp
		}
		if out == "" {
			sum, err := runs.WriteDir(ctx, c, run, rc.OutputDir, rcfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
			return incomplete(counters, rcfg.Expected, sum.Missing)
		}
		if su, key, ok := storeObjectURL(out); ok {
			return a.resultsToStore(ctx, c, counters, run, su, key, rcfg)
		}
		sum, err := runs.WriteFile(ctx, c, run, out, rcfg)
		if err != nil {
			return err
		}
		// Written to standard output, the summary would be mixed into the
		// lines: it goes to stderr then.
		say := a.stdout
		if isStdoutName(out) {
			say = a.stderr
		}
		fmt.Fprintf(say, "wrote %s: %s\n", out, sum)
		return incomplete(counters, rcfg.Expected, sum.Missing)
	})
	return cmd
}

// incompleteError is an output written without every line of the run's
// input: the command exits with exitIncomplete.
type incompleteError struct {
	run      string
	expected uint64
	missing  runs.Missing
	// hint says what to do about it (may be empty).
	hint string
}

func (e *incompleteError) Error() string {
	s := fmt.Sprintf("results of run %q are incomplete: %d of the input's %d lines have no output line: %s",
		e.run, e.missing.Total(), e.expected, e.missing.Reasons())
	if e.hint != "" {
		s += "; " + e.hint
	}
	return s
}

// incomplete is nil when nothing is missing, else an *incompleteError for
// the run of counters rc, whose input has expected lines.
func incomplete(rc *rolloutv1.RunCounters, expected uint64, m runs.Missing) error {
	if m.Total() == 0 {
		return nil
	}
	expected = max(expected, rc.GetTotal())
	var hints []string
	switch {
	case m.Unsubmitted > 0 && rc.GetCancelled():
		hints = append(hints, "the run was cancelled and takes no more lines")
	case m.Unsubmitted > 0:
		hints = append(hints, "submit the same input again to add the lines not yet submitted")
	}
	if m.Pending+m.Running > 0 && !rc.GetCancelled() {
		hints = append(hints, "the run is still going: 'rollout status' shows its progress")
	}
	if m.Unreadable > 0 {
		hints = append(hints, "their error lines name the unreadable objects")
	}
	return &incompleteError{run: rc.GetName(), expected: expected, missing: m, hint: strings.Join(hints, "; ")}
}

// expectedLines is how many lines the run's input has: the most the ledger
// knows of (the run's spec total, or its items), or, with a run config
// whose input files can be read, the non-blank lines of those files when
// more. A config input that cannot be read is said on stderr, and the
// ledger's count is used.
func (a *app) expectedLines(ctx context.Context, rc *batch.RunConfig, counters *rolloutv1.RunCounters) uint64 {
	n := runs.Target(counters)
	if rc == nil {
		return n
	}
	files, err := batch.ExpandGlob(rc.InputGlob)
	var lines uint64
	if err == nil {
		lines, err = batch.CountRecords(ctx, files, batch.DefaultConfig())
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "rollout: warning: cannot count the lines of %s's [input] (%v): counting the %d the cluster knows of\n", rc.Path, err, n)
		return n
	}
	return max(n, lines)
}

// isStdoutName reports whether path names this process's standard output.
func isStdoutName(path string) bool {
	switch filepath.Clean(path) {
	case "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1":
		return true
	}
	return false
}

// loadAnyConfig reads a batch run config, or else a training config: it
// returns the batch config (nil for a training config) and the run's name.
// When the file is neither, the batch config's errors are returned, with
// the training config's.
func loadAnyConfig(path string) (*batch.RunConfig, string, error) {
	rc, err := loadRunConfig(path)
	if err == nil {
		return rc, rc.Name, nil
	}
	if !errors.Is(err, batch.ErrInvalidRunConfig) {
		return nil, "", err
	}
	tc, terr := train.LoadConfig(path)
	if terr != nil {
		return nil, "", fmt.Errorf("%w\n(nor is it a training config: %w)", err, terr)
	}
	return nil, tc.Name, nil
}

// trainResults prints (or writes to out as JSON lines) the finished steps
// of training run run, and writes its newest weights to weightsOut.
func trainResults(ctx context.Context, c coordinator, stdout io.Writer, run, out, weightsOut string, cfg runs.ResultsConfig) error {
	steps, newest, err := runs.TrainSteps(ctx, c, run, cfg)
	if err != nil {
		return err
	}
	if out != "" {
		w, err := batch.NewAtomicWriter(out, 0o644)
		if err != nil {
			return err
		}
		defer w.Abort()
		for _, st := range steps {
			b, err := stepJSON(st)
			if err != nil {
				return err
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		if err := w.Commit(); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		fmt.Fprintf(stdout, "wrote %s: %d steps\n", out, len(steps))
	} else {
		printSteps(stdout, run, steps)
	}
	if weightsOut != "" {
		if newest == nil {
			return fmt.Errorf("training run %q has no weights yet (its init item is not done)", run)
		}
		if err := writeWeights(weightsOut, newest); err != nil {
			return err
		}
		version := 0
		if len(steps) > 0 {
			version = steps[len(steps)-1].Step
		}
		fmt.Fprintf(stdout, "wrote %s: weights version %d (%d bytes)\n", weightsOut, version, len(newest))
	}
	return nil
}

// printSteps writes a table of a training run's finished steps.
func printSteps(w io.Writer, run string, steps []train.Step) {
	fmt.Fprintf(w, "training run %q: %d steps finished\n", run, len(steps))
	if len(steps) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tLOSS\tACCURACY\tHELD-OUT LOSS\tHELD-OUT ACCURACY\tWEIGHTS BLAKE3")
	for _, st := range steps {
		hl, ha := "-", "-"
		if st.Eval != nil {
			hl, ha = fmt.Sprintf("%.4f", st.Eval.Loss), fmt.Sprintf("%.4f", st.Eval.Accuracy)
		}
		fmt.Fprintf(tw, "%d\t%.4f\t%.4f\t%s\t%s\t%s\n", st.Step, st.Train.Loss, st.Train.Accuracy, hl, ha, st.Blake3)
	}
	_ = tw.Flush()
}
