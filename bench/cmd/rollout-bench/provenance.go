package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rollout/rollout/bench/summary"
)

// load1 is the machine's 1-minute load average (/proc/loadavg), or nil
// when it cannot be read.
func load1() *float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return nil
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return nil
	}
	return &v
}

// sourceRevision is the commit the harness was built from and whether the
// work tree had changes: the binary's VCS stamp (go build in a git
// checkout), else `git rev-parse HEAD` in the working directory, else "".
// make bench builds the harness and the binaries it measures from the
// same tree.
func sourceRevision(ctx context.Context) (commit string, dirty bool) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if commit != "" {
			return commit, dirty
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	commit = strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		dirty = len(strings.TrimSpace(string(st))) > 0
	}
	return commit, dirty
}

// stageRuns is, for every stage of res (and every failed one), the run
// that measured it: its own record where the file has one, else (a file
// written before per-stage records) the run's start from stage_started
// or the file's start, with the commit and load unknown.
func stageRuns(res *Results) map[string]summary.Run {
	out := map[string]summary.Run{}
	fill := func(st string) {
		if r, ok := res.StageRuns[st]; ok {
			out[st] = r
			return
		}
		at, ok := res.StageStarted[st]
		if !ok || at.IsZero() {
			at = res.Started
		}
		out[st] = summary.Run{Started: at}
	}
	for _, st := range res.Stages {
		fill(st)
	}
	for st := range res.Errors {
		fill(st)
	}
	return out
}

// summaryTable is the generated summary of docs/BENCHMARKS.md: the
// summary rows of res (read from name) and then of each results file in
// also, each row with its stage's run.
func summaryTable(name string, res *Results, also []string) (string, error) {
	sources := []summary.Source{{Name: name, Rows: rows(res), Runs: stageRuns(res)}}
	for _, f := range also {
		r, err := readResults(f)
		if err != nil {
			return "", err
		}
		sources = append(sources, summary.Source{Name: f, Rows: rows(r), Runs: stageRuns(r)})
	}
	return summary.Table(sources...)
}

// readResults reads a results file; an unreadable or malformed one is an
// error naming it.
func readResults(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("%s is not a results file: %w", path, err)
	}
	return &res, nil
}

// writeDocs rewrites the generated summary block of cfg.docs from res
// (the run's, or --render's file) and cfg.docsAlso. Nothing is written
// when the table cannot be made or the file has no well-formed block.
func writeDocs(cfg *config, res *Results) error {
	name := cfg.render
	if name == "" {
		name = cfg.out
	}
	table, err := summaryTable(name, res, cfg.docsAlso)
	if err != nil {
		return fmt.Errorf("--docs: %w", err)
	}
	doc, err := os.ReadFile(cfg.docs)
	if err != nil {
		return fmt.Errorf("--docs: %w", err)
	}
	out, err := summary.Replace(doc, table)
	if err != nil {
		return fmt.Errorf("--docs %s: %w", cfg.docs, err)
	}
	if err := os.WriteFile(cfg.docs, out, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote the summary table of %s\n", cfg.docs)
	return nil
}
