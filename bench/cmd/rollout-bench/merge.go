package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/rollout/rollout/bench/summary"
)

// mergeInto keeps, in res, the figures of every stage of the results file
// at path that res did not run (res.Stages), so that running a subset of
// the stages (--merge, make bench BENCH=...) updates those stages and
// drops no other stage's figures. res.StageStarted records, per stage,
// when the run that measured it began (a stage kept from path keeps its
// own time, or path's start when path predates the field, and its own
// res.StageRuns record: date, commit and load, where path has one); res.Stages
// becomes every stage present, in the order of allStages. A missing file
// merges nothing; an unreadable one is an error naming it (nothing is
// written over it).
func mergeInto(res *Results, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--merge: %w", err)
	}
	var old Results
	if err := json.Unmarshal(data, &old); err != nil {
		return fmt.Errorf("--merge: %s is not a results file: %w", path, err)
	}
	if res.StageStarted == nil {
		res.StageStarted = map[string]time.Time{}
	}
	for _, st := range res.Stages {
		res.StageStarted[st] = res.Started
	}
	for _, st := range old.Stages {
		if slices.Contains(res.Stages, st) {
			continue
		}
		if !keepStage(res, &old, st) {
			continue
		}
		at := old.StageStarted[st]
		if at.IsZero() {
			at = old.Started
		}
		res.StageStarted[st] = at
		if r, ok := old.StageRuns[st]; ok {
			if res.StageRuns == nil {
				res.StageRuns = map[string]summary.Run{}
			}
			res.StageRuns[st] = r
		}
		if e, ok := old.Errors[st]; ok {
			if res.Errors == nil {
				res.Errors = map[string]string{}
			}
			res.Errors[st] = e
		}
	}
	var stages []string
	for _, st := range allStages {
		if _, ok := res.StageStarted[st]; ok {
			stages = append(stages, st)
		}
	}
	res.Stages = stages
	return nil
}

// keepStage copies stage st's figures from old into res and reports
// whether st is a stage this harness knows.
func keepStage(res, old *Results, st string) bool {
	switch st {
	case "throughput":
		res.Throughput, res.Latency, res.CPU = old.Throughput, old.Latency, old.CPU
	case "barelog":
		res.BareLog = old.BareLog
	case "etcd":
		res.Etcd = old.Etcd
		if res.Machine.Etcd == "" {
			res.Machine.Etcd = old.Machine.Etcd
		}
	case "failover":
		res.Failover, res.FailoverMultiplied = old.Failover, old.FailoverMultiplied
	case "steal":
		res.Steal = old.Steal
	case "scale":
		res.Scale = old.Scale
	case "payload":
		res.Payload, res.PayloadS3 = old.Payload, old.PayloadS3
	case "scale-e2e":
		res.ScaleE2E = old.ScaleE2E
	case "fairness":
		res.Fairness = old.Fairness
	case "liveness":
		res.Liveness = old.Liveness
	default:
		return false
	}
	return true
}
