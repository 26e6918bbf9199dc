package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// trainOptions are the flags of `rollout train`.
type trainOptions struct {
	config     string
	run        string
	wait       bool
	interval   time.Duration
	untilStep  int
	weightsOut string
	items      runs.ItemsConfig
	// tenant and priority go into the run's spec (see rollout submit).
	tenant   string
	priority uint32
}

func (a *app) trainCmd() *cobra.Command {
	o := trainOptions{interval: defaultPollInterval,
		items: runs.ItemsConfig{RetryDead: true, StaleAfter: runs.DefaultStaleAfter, ChunkItems: 256}}
	var coords []string
	var storeURL string
	maxFailures := uint32(runs.DefaultMaxFailures)
	cmd := &cobra.Command{
		Use:   "train --coord H:P[,...] --config TRAIN.toml [--wait] [--weights-out FILE]",
		Short: "Submit a training run (idempotent: resubmitting resumes it); --wait follows it step by step",
		Long: "train reads a training config (TOML: [model] hidden or layers and activation, [data] set and\n" +
			"dir, [train] shards, batch_size, steps, learning_rate, seed, checkpoint_interval; unknown keys are\n" +
			"refused with their line), loads the data set (the digits set: run `make data` first), plans the\n" +
			"run and submits it: an init item (weights version 0 from the seed), then per step one item per\n" +
			"shard (the gradient of its part of the batch at the step's input weights) and a reduce item\n" +
			"that depends on them (sums the gradients in shard order, takes the SGD step and yields the\n" +
			"next weights version, named by its blake3). Workers started with --backend cpu or gpu run them.\n\n" +
			"Item ids are derived from the run name and each item's role, so submitting the same config\n" +
			"again resumes the run: done items are kept, nothing is computed twice. --until-step K submits\n" +
			"only the items up to step K (run again without it to go on).\n\n" +
			"With --wait it prints each step's loss and accuracy as its reduce item completes (and the\n" +
			"held-out loss and accuracy on checkpoint steps), then a summary with the final held-out\n" +
			"accuracy and the final weights' blake3; --weights-out FILE also writes the final weights\n" +
			"(little-endian float32, whose blake3 is the one printed).",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	addCoordFlag(cmd, &coords)
	f.StringVar(&o.config, "config", "", "training config (TOML) (required)")
	f.StringVar(&o.run, "run", "", "run name (default: the config's name, else one derived from the config)")
	f.BoolVar(&o.wait, "wait", false, "follow the run: print each step's loss and accuracy, then a summary")
	f.DurationVar(&o.interval, "interval", o.interval, "with --wait: how often to poll progress")
	f.IntVar(&o.untilStep, "until-step", 0, "submit (and with --wait, follow) only the items up to this step's weights")
	f.StringVar(&o.weightsOut, "weights-out", "", "with --wait: write the final weights (little-endian float32) to FILE")
	f.DurationVar(&o.items.StaleAfter, "stale-after", o.items.StaleAfter, "when resubmitting, re-enqueue running items whose worker has been silent this long (0: never)")
	f.Uint32Var(&maxFailures, "max-failures", maxFailures, "failed attempts that make an item failed for good")
	f.Uint32Var(&o.priority, "priority", 0, "the run's priority, 1 (lowest) to 5 (highest): claims serve a higher priority first (0: 3)")
	f.StringVar(&o.tenant, "tenant", "", "submit the run for this tenant (needs an admin certificate; default: the certificate's name)")
	f.IntVar(&o.items.ChunkItems, "chunk-items", o.items.ChunkItems, "most items per SubmitItems call")
	addStoreFlag(cmd, &storeURL)
	_ = cmd.MarkFlagRequired("config")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		switch {
		case o.wait && o.interval <= 0:
			return usagef("--interval must be positive, got %v", o.interval)
		case o.untilStep < 0:
			return usagef("--until-step must not be negative, got %d", o.untilStep)
		case o.weightsOut != "" && !o.wait:
			return usagef("--weights-out needs --wait")
		case o.items.ChunkItems <= 0:
			return usagef("--chunk-items must be positive, got %d", o.items.ChunkItems)
		case o.items.StaleAfter < 0:
			return usagef("--stale-after must not be negative, got %v", o.items.StaleAfter)
		case o.priority > 5 || cmd.Flags().Changed("priority") && o.priority == 0:
			return usagef("--priority must be 1 (lowest) to 5 (highest), got %d", o.priority)
		case maxFailures == 0:
			return usagef("--max-failures must be positive")
		}
		cfg, err := loadTrainConfig(o.config)
		if err != nil {
			return err
		}
		if cmd.Flags().Changed("run") {
			if err := checkRunName(o.run); err != nil {
				return err
			}
			cfg.Name = o.run
		}
		if o.untilStep > cfg.Steps {
			return usagef("--until-step %d is beyond the config's %d steps", o.untilStep, cfg.Steps)
		}
		conn, err := a.client(coords)
		if err != nil {
			return err
		}
		defer conn.Close()
		if storeURL, err = a.resolveStore(ctx, conn, storeURL, cfg.Name); err != nil {
			return err
		}
		st, err := openStore(ctx, storeURL)
		if err != nil {
			return err
		}
		defer st.Close()
		// Results (steps' metrics, weights) are read through the store.
		c := runs.WithStore(conn, st, 0)
		addrs, _ := parseCoords(coords)
		o.items.Coords, o.items.Timeout = addrs, a.timeout
		shape, err := submitTraining(ctx, c, st, cfg, o.untilStep, o.items, maxFailures, a.stdout, a.identity(), o.tenant, o.priority)
		if err != nil {
			return err
		}
		if !o.wait {
			return nil
		}
		fp := newTrainPrinter(a.stdout, shape)
		rc, last, err := runs.FollowTraining(ctx, c, cfg.Name, shape, runs.FollowConfig{
			Interval: o.interval, Timeout: a.timeout, UntilStep: o.untilStep, Step: fp.step})
		if err != nil {
			return err
		}
		return finishTraining(a.stdout, cfg.Name, shape, rc, last, o.untilStep, o.weightsOut)
	})
	return cmd
}

// loadTrainConfig reads a training config; its errors name the file, line
// and key.
func loadTrainConfig(path string) (*train.Config, error) {
	// Results travel through the run's store: no result-size cap on the
	// model (see train.CheckLimitsFor).
	cfg, err := train.LoadConfigFor(path, true)
	if errors.Is(err, train.ErrInvalidConfig) {
		return nil, fmt.Errorf("invalid training config (nothing was sent):\n%w", err)
	}
	return cfg, err
}

// describeModel is e.g. "mlp 64-32-10 relu (2410 parameters)".
func describeModel(m mlp.Config) string {
	s := "mlp "
	for i, n := range m.Sizes {
		if i > 0 {
			s += "-"
		}
		s += fmt.Sprint(n)
	}
	return fmt.Sprintf("%s %s (%d parameters)", s, mlp.ActivationName(m.Act), m.NumParams())
}

// submitTraining loads cfg's data, plans the run and submits its items
// (those up to step untilStep when positive) as run cfg.Name, printing
// what it did to out, for tenant ("" for the certificate's) at priority (0
// for the default), as the certificate id (the zero Identity without TLS):
// a tenant the certificate may not submit for, or a run of another
// tenant, is refused before anything is stored (runs.CheckSubmitter). It
// returns the run's layout.
func submitTraining(ctx context.Context, c coordinator, st *store.Store, cfg *train.Config, untilStep int, pc runs.ItemsConfig,
	maxFailures uint32, out io.Writer, id mtls.Identity, tenant string, priority uint32) (runs.TrainShape, error) {
	shape := runs.TrainShape{Shards: cfg.Shards, Steps: cfg.Steps}
	data, err := train.LoadDigits(cfg.DataDir)
	if err != nil {
		return shape, err
	}
	plan, err := train.NewPlan(cfg, data)
	if err != nil {
		return shape, err
	}
	n := plan.Len()
	if untilStep > 0 {
		n = int(shape.ReduceIndex(untilStep)) + 1
	}
	items := make([]*rolloutv1.SubmitItem, 0, n)
	for i := range n {
		it, err := plan.Item(i)
		if err != nil {
			return shape, err
		}
		items = append(items, &rolloutv1.SubmitItem{Id: it.ID, Index: it.Index, Payload: it.Payload, DependsOn: it.DependsOn})
	}
	if err := runs.CheckSubmitter(ctx, c, cfg.Name, id, tenant, pc.Timeout); err != nil {
		return shape, err
	}
	if err := checkSameRun(ctx, c, cfg.Name, plan, pc.Timeout); err != nil {
		return shape, err
	}
	pc.Run, pc.Items = cfg.Name, items
	pc.Spec = &rolloutv1.RunSpec{Kind: train.Kind, Total: uint64(plan.Len()), MaxFailures: maxFailures, Tenant: tenant, Priority: priority}
	if st != nil {
		// The steps' data travel through the store: each payload once, in
		// content-addressed chunks, referenced with its hash.
		prefix, err := runs.DataPrefix(ctx, c, cfg.Name, pc.Timeout)
		if err != nil {
			return shape, err
		}
		up, reused, err := runs.StorePayloadsUnder(ctx, st, store.RunInputs(cfg.Name, prefix), items)
		if err != nil {
			return shape, err
		}
		pc.Spec.Store, pc.Spec.DataPrefix = st.URL(), prefix
		fmt.Fprintf(out, "store %s: %d input chunk(s), %d uploaded, %d already there\n", storeurl.Redact(st.URL()), up+reused, up, reused)
	}
	res, err := runs.SubmitItems(ctx, c, pc)
	if err != nil {
		return shape, err
	}
	what := fmt.Sprintf("%d steps of %d shards, batch %d, %s", cfg.Steps, cfg.Shards, cfg.BatchSize, describeModel(cfg.Model))
	if untilStep > 0 {
		what += fmt.Sprintf("; submitted up to step %d", untilStep)
	}
	fmt.Fprintf(out, "submitted training run %q (%s): %s\n", cfg.Name, what, res)
	return shape, nil
}

// ErrOtherRun: a run of that name exists and is not this config's.
var ErrOtherRun = errors.New("the run exists with another config")

// checkSameRun refuses to submit plan into an existing run that is not the
// same training run: another kind, another item count, or other payloads
// of its init item, step 1's first shard and step 1's reduce (which carry
// the model, the seed, the data, the shards, the batch size and the
// learning rate). Item ids are derived from the run name and roles only,
// so without this check the same name with a changed config would
// silently resume the old run. A run that does not exist yet passes.
func checkSameRun(ctx context.Context, c coordinator, run string, plan *train.Plan, timeout time.Duration) error {
	_, rc, err := runs.Status(ctx, c, run, timeout)
	if errors.Is(err, runs.ErrRunNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	other := func(format string, args ...any) error {
		return fmt.Errorf("%w: run %q already exists and %s; nothing was sent (give another name with --run or the config's name, or resubmit the config it was started with)",
			ErrOtherRun, run, fmt.Sprintf(format, args...))
	}
	if rc.GetKind() != train.Kind {
		return other("is a run of kind %s", kindName(rc.GetKind()))
	}
	if t := runs.Target(rc); t != uint64(plan.Len()) {
		return other("has %d items where this config plans %d (another number of steps or shards)", t, plan.Len())
	}
	shards := plan.Config().Shards
	for _, i := range []int{0, 1, shards + 1} {
		it, err := runs.ItemAt(ctx, c, run, uint64(i), timeout)
		if err != nil {
			return err
		}
		if it == nil {
			continue
		}
		want, err := plan.Item(i)
		if err != nil {
			return err
		}
		same := bytes.Equal(it.GetPayload(), want.Payload)
		if pr := it.GetPayloadRef(); pr != nil {
			sum := store.Hash(want.Payload)
			same = bytes.Equal(pr.GetBlake3(), sum[:])
		}
		if !same || !bytes.Equal(it.GetId(), want.ID) {
			return other("its %s item (index %d) differs from this config's (another model, seed, data set, batch size, shards or learning rate)", want.Role, i)
		}
	}
	return nil
}

// trainPrinter prints one line per finished step.
type trainPrinter struct {
	w     io.Writer
	shape runs.TrainShape
	start time.Time
}

func newTrainPrinter(w io.Writer, shape runs.TrainShape) *trainPrinter {
	return &trainPrinter{w: w, shape: shape, start: time.Now()}
}

// step prints st: step 0 (the init weights) as "init", the others with
// their batch metrics and, on checkpoints, the held-out ones.
func (p *trainPrinter) step(st runs.StepResult) error {
	fmt.Fprintln(p.w, formatStep(st.Step, p.shape.Steps, time.Since(p.start)))
	return nil
}

// formatStep is one step's line.
func formatStep(st train.Step, steps int, elapsed time.Duration) string {
	width := len(fmt.Sprint(steps))
	if st.Step == 0 {
		return fmt.Sprintf("step %*d/%d  initial weights %s", width, 0, steps, short(st.Blake3))
	}
	line := fmt.Sprintf("step %*d/%d  loss %.4f  accuracy %.4f", width, st.Step, steps, st.Train.Loss, st.Train.Accuracy)
	if st.Eval != nil {
		line += fmt.Sprintf("  held-out loss %.4f accuracy %.4f", st.Eval.Loss, st.Eval.Accuracy)
	}
	line += "  weights " + short(st.Blake3)
	if elapsed > 0 {
		line += "  [" + batch.FormatDuration(elapsed) + "]"
	}
	return line
}

// short abbreviates a blake3 hex digest.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// finishTraining prints the summary of a followed run and writes the
// final weights to weightsOut (when set). A run that ended with dead items
// before its last step is an error.
func finishTraining(out io.Writer, run string, shape runs.TrainShape, rc *rolloutv1.RunCounters, last *runs.StepResult, untilStep int, weightsOut string) error {
	target := shape.Steps
	if untilStep > 0 {
		target = untilStep
	}
	if last == nil || last.Step.Step < target {
		done := -1
		if last != nil {
			done = last.Step.Step
		}
		return fmt.Errorf("training run %q stopped at step %d of %d: %d dead item(s); 'rollout results --run %s' shows their errors (submit the config again to retry them)",
			run, max(done, 0), target, rc.GetDead(), run)
	}
	if untilStep > 0 && untilStep < shape.Steps {
		fmt.Fprintf(out, "reached step %d of %d (--until-step); submit the config again without it to go on\n", untilStep, shape.Steps)
	} else {
		fmt.Fprintf(out, "trained %d steps", shape.Steps)
		if ev := last.Eval; ev != nil {
			fmt.Fprintf(out, ": final held-out accuracy %.4f (loss %.4f, %d samples)", ev.Accuracy, ev.Loss, ev.Count)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "weights blake3 %s (step %d, %d float32)\n", last.Blake3, last.Step.Step, len(last.Weights)/4)
	if weightsOut != "" {
		if err := writeWeights(weightsOut, last.Weights); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s (%d bytes)\n", weightsOut, len(last.Weights))
	}
	return nil
}

// writeWeights writes weights atomically.
func writeWeights(path string, w []byte) error {
	f, err := batch.NewAtomicWriter(path, 0o644)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(w); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// stepJSON is a step as one JSON line (train.Step's fields).
func stepJSON(st train.Step) ([]byte, error) { return json.Marshal(st) }
