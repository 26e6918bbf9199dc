package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rollout/rollout/api/runs"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/batch/train"
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
			"truncated file.\n\n" +
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
		case out == "":
			sum, err := runs.WriteDir(ctx, c, run, rc.OutputDir, rcfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
			return nil
		}
		if su, key, ok := storeObjectURL(out); ok {
			return a.resultsToStore(ctx, c, run, su, key, rcfg)
		}
		sum, err := runs.WriteFile(ctx, c, run, out, rcfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "wrote %s: %s\n", out, sum)
		return nil
	})
	return cmd
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
