package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"
)

// mergeEarlier adds to res, which holds the figures of the stages this run
// ran, the figures of every other stage that the results file at path
// holds from earlier runs, so that running one stage (make bench
// BENCH=liveness) does not drop the others'. A stage that ran now replaces
// its earlier figures (and its earlier failure) whole. A missing file adds
// nothing; one that does not parse is an error (nothing is overwritten).
func mergeEarlier(path string, res *Results) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var old Results
	if err := json.Unmarshal(data, &old); err != nil {
		return fmt.Errorf("%s holds no results to keep (use --fresh to overwrite it): %w", path, err)
	}
	for _, st := range allStages {
		if slices.Contains(res.Stages, st) || !old.hasStage(st) {
			continue
		}
		keepStage(st, &old, res)
		res.Stages = append(res.Stages, st)
		if e, ok := old.Errors[st]; ok {
			if res.Errors == nil {
				res.Errors = map[string]string{}
			}
			res.Errors[st] = e
		}
		at, ok := old.StageStarted[st]
		if !ok {
			// A file written before stage_started: its run's start.
			at = old.Started
		}
		if res.StageStarted == nil {
			res.StageStarted = map[string]time.Time{}
		}
		res.StageStarted[st] = at
	}
	// In allStages order, as a run lists them.
	slices.SortStableFunc(res.Stages, func(a, b string) int { return slices.Index(allStages, a) - slices.Index(allStages, b) })
	return nil
}

// hasStage reports whether r holds figures, or a failure, of stage st.
func (r *Results) hasStage(st string) bool {
	if _, failed := r.Errors[st]; failed {
		return true
	}
	switch st {
	case "throughput":
		return len(r.Throughput) > 0 || r.Latency != nil || r.CPU != nil
	case "barelog":
		return len(r.BareLog) > 0
	case "etcd":
		return r.Etcd != nil
	case "failover":
		return r.Failover != nil
	case "steal":
		return r.Steal != nil
	case "scale":
		return r.Scale != nil
	case "payload":
		return r.Payload != nil
	case "liveness":
		return r.Liveness != nil
	case "scale-e2e":
		return r.ScaleE2E != nil
	}
	return false
}

// keepStage copies stage st's figures from old into res.
func keepStage(st string, old, res *Results) {
	switch st {
	case "throughput":
		res.Throughput, res.Latency, res.CPU = old.Throughput, old.Latency, old.CPU
	case "barelog":
		res.BareLog = old.BareLog
	case "etcd":
		res.Etcd, res.Machine.Etcd = old.Etcd, old.Machine.Etcd
	case "failover":
		res.Failover = old.Failover
	case "steal":
		res.Steal = old.Steal
	case "scale":
		res.Scale = old.Scale
	case "payload":
		res.Payload = old.Payload
	case "liveness":
		res.Liveness = old.Liveness
	case "scale-e2e":
		res.ScaleE2E = old.ScaleE2E
	}
}
