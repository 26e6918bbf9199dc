package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rollout/rollout/api/runs"
	"github.com/rollout/rollout/batch"
)

func (a *app) resultsCmd() *cobra.Command {
	var coords []string
	var run, out, configPath string
	pageSize := uint32(runs.DefaultPageSize)
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
			sum, err := runs.WriteDir(ctx, c, run, rc.OutputDir, runs.ResultsConfig{PageSize: pageSize, Timeout: a.timeout})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
			return nil
		}
		sum, err := runs.WriteFile(ctx, c, run, out, runs.ResultsConfig{PageSize: pageSize, Timeout: a.timeout})
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "wrote %s: %s\n", out, sum)
		return nil
	})
	return cmd
}
