package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
)

// trainDemoConfig configures `rollout demo-train`.
type trainDemoConfig struct {
	demo demoConfig
	// Config is the training config; Backend is auto, cpu or gpu.
	Config  string
	Backend string
	// MinAccuracy is the final held-out accuracy the demo requires.
	MinAccuracy float64
}

func defaultTrainDemoConfig() trainDemoConfig {
	d := defaultDemoConfig()
	d.Run = "demo-train"
	d.Concurrency = 2
	d.RunTimeout = 10 * time.Minute
	return trainDemoConfig{demo: d, Config: filepath.Join("examples", "train.toml"), Backend: "auto", MinAccuracy: 0.95}
}

func (a *app) demoTrainCmd() *cobra.Command {
	cfg := defaultTrainDemoConfig()
	cmd := &cobra.Command{
		Use:   "demo-train [--bin DIR] [--config TRAIN.toml] [--backend auto|cpu|gpu] [--workers 3]",
		Short: "Train on digits on a local 3-replica cluster and workers, kill the leader part-way, check the accuracy",
		Long: "demo-train starts real rollout-coord and rollout-worker processes from --bin in a fresh\n" +
			"temporary directory (free loopback ports, mutual TLS, logs in DIR/logs), submits the training\n" +
			"run of --config (examples/train.toml: the digits data set, which `make data` fetches), prints\n" +
			"each step's loss and accuracy as its reduce item completes, SIGKILLs the Raft leader when about\n" +
			"a third of the steps are done, and waits for the run to finish under the new leader. The\n" +
			"workers run --backend gpu where a CUDA driver and device can be opened, else cpu (--backend\n" +
			"picks one; gpu then fails at start without a driver). It prints a summary and exits 0 only when\n" +
			"the final held-out accuracy is at least --min-accuracy. Every child is stopped on every exit.",
		Args: cobra.NoArgs,
	}
	cfg.demo.clusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Config, "config", cfg.Config, "training config (TOML)")
	f.StringVar(&cfg.Backend, "backend", cfg.Backend, "workers' backend: auto (gpu where a CUDA driver is present, else cpu), cpu or gpu")
	f.Float64Var(&cfg.MinAccuracy, "min-accuracy", cfg.MinAccuracy, "final held-out accuracy the demo requires")
	f.BoolVar(&cfg.demo.Keep, "keep", cfg.demo.Keep, "keep the temporary directory (data, logs)")
	f.BoolVar(&cfg.demo.KillLeader, "kill-leader", cfg.demo.KillLeader, "SIGKILL the leader when about a third of the steps are done")
	f.Float64Var(&cfg.demo.KillAt, "kill-at", cfg.demo.KillAt, "fraction of the steps done when the leader is killed")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := a.demoBin("demo-train", &cfg.demo); err != nil {
			return err
		}
		cfg.demo.Input = cfg.Config // checked by demoConfig.check as non-empty
		if err := cfg.demo.check(); err != nil {
			return err
		}
		switch {
		case cfg.Backend != "auto" && cfg.Backend != "cpu" && cfg.Backend != "gpu":
			return usagef("--backend %q: want auto, cpu or gpu", cfg.Backend)
		case !(cfg.MinAccuracy >= 0 && cfg.MinAccuracy <= 1):
			return usagef("--min-accuracy must be in [0, 1], got %v", cfg.MinAccuracy)
		}
		d := &trainDemo{demo: &demo{cfg: cfg.demo, out: a.stdout, errOut: a.stderr, timeout: a.timeout, start: time.Now()}, cfg: cfg}
		return d.run(ctx)
	})
	return cmd
}

// trainDemo is one run of `rollout demo-train`: the batch demo's cluster
// handling (start, cleanup, log tails) with a training run.
type trainDemo struct {
	*demo
	cfg     trainDemoConfig
	backend string // cpu or gpu, as chosen
}

// run is the whole demo; every child is stopped before it returns.
func (d *trainDemo) run(ctx context.Context) error {
	if err := d.binaries(); err != nil {
		return err
	}
	tc, err := loadTrainConfig(d.cfg.Config)
	if err != nil {
		return err
	}
	tc.Name = d.cfg.demo.Run
	if _, err := train.LoadDigits(tc.DataDir); err != nil {
		return err // says to run `make data`; nothing started
	}
	if err := d.pickBackend(ctx); err != nil {
		return err
	}
	intro := func() {
		d.say("demo directory %s", d.dir)
		if !d.cfg.demo.TLS {
			d.say("WARNING: plaintext (--tls=false): every process runs with --insecure, without authentication")
		}
	}
	return d.supervise(ctx, "rollout-demo-train-", intro, d.startTrainWorkers, func(ctx context.Context, client *coordclient.Client, st *store.Store) error {
		return d.train(ctx, runs.WithStore(client, st, 0), st, tc)
	})
}

// train submits the training run, follows it step by step, kills the
// leader part-way and checks the final held-out accuracy.
func (d *trainDemo) train(ctx context.Context, c coordinator, st *store.Store, tc *train.Config) error {
	var sub strings.Builder
	shape, err := submitTraining(ctx, c, st, tc, 0, runs.ItemsConfig{RetryDead: true, ChunkItems: 256, Timeout: d.timeout}, runs.DefaultMaxFailures, &sub, mtls.Identity{}, "", 0)
	if err != nil {
		return err
	}
	d.say("%s", strings.TrimSpace(sub.String()))
	runStart := time.Now()
	last, lk, err := d.follow(ctx, c, shape)
	if err != nil {
		return err
	}
	elapsed := time.Since(runStart)
	if last == nil || last.Step.Step < shape.Steps {
		return fmt.Errorf("FAILED: the run stopped before its last step (dead items; see the logs)")
	}
	ev := last.Eval
	if ev == nil {
		return fmt.Errorf("FAILED: the last step carries no held-out evaluation")
	}
	fmt.Fprintf(d.out, "\ntrained %d steps of %d shards on %d %s worker(s) in %s (%.1f steps/s); %s",
		shape.Steps, shape.Shards, d.cfg.demo.Workers, d.backend, batch.FormatDuration(elapsed), float64(shape.Steps)/elapsed.Seconds(), lk.summary())
	fmt.Fprintf(d.out, "\nfinal held-out accuracy %.4f (loss %.4f, %d samples); weights blake3 %s\n", ev.Accuracy, ev.Loss, ev.Count, last.Blake3)
	if ev.Accuracy < d.cfg.MinAccuracy {
		return fmt.Errorf("FAILED: final held-out accuracy %.4f is below %.4f", ev.Accuracy, d.cfg.MinAccuracy)
	}
	fmt.Fprintf(d.out, "PASS  held-out accuracy %.4f >= %.4f\n", ev.Accuracy, d.cfg.MinAccuracy)
	return nil
}

// pickBackend settles --backend auto: gpu when the CUDA driver opens
// device 0 here (the workers run on this machine), else cpu, saying why.
func (d *trainDemo) pickBackend(ctx context.Context) error {
	if d.cfg.Backend != "auto" {
		d.backend = d.cfg.Backend
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	name, err := probeGPU(octx)
	if err != nil {
		d.backend = "cpu"
		d.say("no usable GPU (%v): the workers run --backend cpu", err)
		return nil
	}
	d.backend = "gpu"
	d.say("found %s: the workers run --backend gpu", name)
	return nil
}

// startTrainWorkers starts the workers on the chosen backend.
func (d *trainDemo) startTrainWorkers() error {
	for i := range d.cfg.demo.Workers {
		id := fmt.Sprintf("w%d", i+1)
		w, err := d.cl.StartWorker(id, "--backend", d.backend, "--concurrency", fmt.Sprint(d.cfg.demo.Concurrency), "--heartbeat", "500ms")
		if err != nil {
			return err
		}
		d.say("started worker %s (pid %d): %s backend, concurrency %d", id, w.Pid(), d.backend, d.cfg.demo.Concurrency)
	}
	return nil
}

// follow prints each step as it finishes (runs.FollowTraining) and kills
// the leader once KillAt of the steps are done. It returns the last step
// and the leaders seen and the failover.
func (d *trainDemo) follow(ctx context.Context, c coordinator, shape runs.TrainShape) (*runs.StepResult, *leaderKill, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.demo.RunTimeout)
	defer cancel()
	lk := d.leaderKill()
	progress := func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
		if _, err := lk.observe(resp); err != nil {
			return err
		}
		done := shape.Completed(rc.GetDone())
		if !lk.killed && float64(done) >= d.cfg.demo.KillAt*float64(shape.Steps) && done < shape.Steps {
			return lk.kill(ctx, fmt.Sprintf("step %d of %d", done, shape.Steps))
		}
		return nil
	}
	step := func(st runs.StepResult) error {
		d.say("%s", formatStep(st.Step, shape.Steps, 0))
		return nil
	}
	_, last, err := runs.FollowTraining(ctx, c, d.cfg.demo.Run, shape, runs.FollowConfig{
		Interval: 200 * time.Millisecond, Timeout: d.timeout, Step: step, Progress: progress})
	if err != nil {
		return nil, nil, d.runTimeout(ctx, err)
	}
	if !lk.killed {
		d.say("note: the run finished before the leader could be killed")
	}
	return last, lk, nil
}
