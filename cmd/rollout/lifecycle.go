package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/gateway"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

func (a *app) cancelCmd() *cobra.Command {
	var coords []string
	var run string
	cmd := &cobra.Command{
		Use:   "cancel --coord H:P[,...] --run NAME",
		Short: "Cancel a run: no new claims, pending items cancelled, running ones may finish",
		Long: "cancel stops a run. Its pending items become cancelled at once and no worker claims\n" +
			"any of its items again; items already running may finish (their results are kept) and\n" +
			"are otherwise cancelled when their worker gives them back. A cancelled run takes no new\n" +
			"items; `rollout delete` removes it. Cancelling twice is harmless. Role client or admin.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&run, "run", "", "the run to cancel (required)")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := checkRunName(run); err != nil {
			return err
		}
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		resp, err := c.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: run})
		if err != nil {
			return a.rpcError(fmt.Sprintf("cancel run %q", run), a.timeout, err)
		}
		fmt.Fprintf(a.stdout, "cancelled run %q: %d pending item(s) cancelled, %d still running (they may finish)\n",
			run, resp.GetCancelled(), resp.GetRunning())
		return nil
	})
	return cmd
}

func (a *app) deleteCmd() *cobra.Command {
	var coords []string
	var run string
	var keepData bool
	cmd := &cobra.Command{
		Use:   "delete --coord H:P[,...] --run NAME [--keep-data]",
		Short: "Delete a finished or cancelled run: its ledger records, then its objects in the store",
		Long: "delete removes a finished or cancelled run (cancel an active one first): its records\n" +
			"leave the ledger (the next snapshot is smaller by them; the event history keeps a line\n" +
			"saying who deleted it), then its objects leave its store: everything under the run's own\n" +
			"prefix (clusters/CLUSTER/runs/NAME/INCARNATION/, or runs/NAME/ for a run recorded before\n" +
			"cluster identities): uploaded input chunks and results. Nothing of another cluster, or of\n" +
			"another incarnation of the name, is touched, nor an input referenced where it already was;\n" +
			"on a file store no emptied directory is left. --keep-data keeps the objects. Role client or admin.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&run, "run", "", "the run to delete (required)")
	cmd.Flags().BoolVar(&keepData, "keep-data", false, "keep the run's objects in its store")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := checkRunName(run); err != nil {
			return err
		}
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		resp, err := c.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: run})
		if err != nil {
			return a.rpcError(fmt.Sprintf("delete run %q", run), a.timeout, err)
		}
		fmt.Fprintf(a.stdout, "deleted run %q from the ledger: %d item(s)\n", run, resp.GetItems())
		if resp.GetStore() == "" {
			return nil
		}
		where := storeurl.Redact(resp.GetStore())
		// The run's own prefix, as the ledger recorded it (a coordinator
		// of a release before cluster identities names none: runs/NAME/).
		prefix := store.RunData(run, resp.GetDataPrefix())
		if runs.RunPrefixOf(prefix+"x") != prefix {
			return fmt.Errorf("the run left the ledger, but the coordinator named %q as its prefix, which is not a run prefix; nothing was removed from %s", prefix, where)
		}
		if keepData {
			fmt.Fprintf(a.stdout, "kept its objects under %s in %s (--keep-data)\n", prefix, where)
			return nil
		}
		st, err := store.Open(ctx, resp.GetStore(), store.DefaultOptions())
		if err != nil {
			return fmt.Errorf("the run left the ledger, but its store %s cannot be opened to remove its objects under %s: %w", where, prefix, err)
		}
		defer st.Close()
		n, err := st.DeletePrefix(ctx, prefix)
		if err != nil {
			return fmt.Errorf("the run left the ledger; removing its objects under %s in %s stopped after %d: %w", prefix, where, n, err)
		}
		fmt.Fprintf(a.stdout, "removed %d object(s) under %s from %s\n", n, prefix, where)
		return nil
	})
	return cmd
}

// resultsToStore writes a run's results as one object of another store
// (rollout results -o s3://bucket/key): streamed, stored only when whole.
// It returns an *incompleteError when lines of the run (counters rc) are
// missing.
func (a *app) resultsToStore(ctx context.Context, c coordinator, rc *rolloutv1.RunCounters, run, storeURL, key string, cfg runs.ResultsConfig) error {
	out, err := store.Open(ctx, storeURL, store.DefaultOptions())
	if err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	defer out.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // an unfinished upload is abandoned, leaving no object
	w, err := out.NewWriter(wctx, key)
	if err != nil {
		return err
	}
	sum, err := runs.WriteTo(ctx, c, run, w, cfg)
	if err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("storing %s in %s: %w", key, storeurl.Redact(storeURL), err)
	}
	fmt.Fprintf(a.stdout, "wrote %s in %s: %s\n", key, storeurl.Redact(storeURL), sum)
	return incomplete(rc, cfg.Expected, sum.Missing)
}

func (a *app) gcCmd() *cobra.Command {
	var coords, distinct, removeForeign []string
	var storeURL string
	var yes bool
	cfg := runs.SweepConfig{Grace: time.Hour}
	cmd := &cobra.Command{
		Use:   "gc --coord H:P[,...] [--store URL] [--grace 1h] [--yes | --dry-run] [--distinct-from URL]... [--remove-foreign PREFIX]...",
		Short: "Remove the store's objects that no run of the ledger needs (prints them; --yes removes them)",
		Long: "gc sweeps a store: for every run the ledger holds whose store it is, it removes the result\n" +
			"objects no item references (written by a worker that lost the item: a stale owner, a stolen\n" +
			"item; the ledger recorded another object); and it removes every prefix of this cluster's runs\n" +
			"(clusters/CLUSTER/runs/NAME/INCARNATION/, CLUSTER as rollout cluster shows it) that the ledger no\n" +
			"longer holds (deleted by its retention, say). Everything else under runs/ and clusters/ is\n" +
			"foreign: another cluster's prefixes, and each runs/NAME/ (the layout before cluster identities)\n" +
			"that is not a run of this ledger. gc lists them and leaves them alone; --remove-foreign PREFIX\n" +
			"(a whole run prefix as listed, repeatable; an admin certificate only) removes one all the same.\n" +
			"Only objects older than --grace go: a\n" +
			"submit uploads its chunks before the run exists, and a worker writes its results before it\n" +
			"reports them. Inputs of live runs, and every object an item of a live run references, are\n" +
			"kept. In a gateway's store it also removes the bytes of files that never became visible (a\n" +
			"gateway killed mid-upload).\n\n" +
			"A run's store is matched by identity, not spelling: file:///srv/store, file:///srv/store/,\n" +
			"file:///srv//store and file:///srv/store?x=1 are one store. If the ledger holds runs on a store\n" +
			"that may share this one's bytes (a directory inside it or around it, the same bucket with\n" +
			"another endpoint, region or prefix), gc cannot tell their objects from garbage: it removes\n" +
			"nothing, names those runs and exits non-zero. Run it again with --store spelled as such a run\n" +
			"records it if that is this store, or with --distinct-from URL for each store that is another.\n\n" +
			"Without --yes gc only prints what it would remove (as --dry-run does). Role client or admin.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	addStoreFlag(cmd, &storeURL)
	cmd.Flags().DurationVar(&cfg.Grace, "grace", cfg.Grace, "leave objects younger than this")
	cmd.Flags().BoolVar(&cfg.DryRun, "dry-run", false, "print what would be removed; remove nothing (the default without --yes)")
	cmd.Flags().BoolVar(&yes, "yes", false, "remove what gc finds; without it gc only prints what it would remove")
	cmd.Flags().StringArrayVar(&distinct, "distinct-from", nil, "a store URL that is another store than --store though it looks related "+
		"(a directory inside it, the same bucket with other parameters): its runs do not stop gc (repeatable)")
	cmd.Flags().StringArrayVar(&removeForeign, "remove-foreign", nil, "remove this foreign run prefix all the same, as gc lists it "+
		"(runs/NAME/ or clusters/ID/runs/NAME/INCARNATION/; repeatable; --grace, --yes and --dry-run apply; admin certificate only)")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if cfg.Grace <= 0 {
			return usagef("--grace must be positive, got %v", cfg.Grace)
		}
		if yes && cfg.DryRun {
			return usagef("--yes and --dry-run contradict each other: give one")
		}
		for _, d := range distinct {
			if err := storeurl.Check(d); err != nil {
				return usagef("--distinct-from: %v", err)
			}
		}
		for _, p := range removeForeign {
			if runs.RunPrefixOf(p+"x") != p {
				return usagef("--remove-foreign %q is not a whole run prefix: give one as gc lists it (runs/NAME/ or clusters/ID/runs/NAME/INCARNATION/, with the trailing slash)", p)
			}
		}
		cfg.DryRun = !yes
		cfg.Distinct, cfg.RemoveForeign = distinct, removeForeign
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		if len(removeForeign) > 0 {
			if err := a.requireAdmin("--remove-foreign"); err != nil {
				return err
			}
		}
		if storeURL, err = a.resolveStore(ctx, c, storeURL, ""); err != nil {
			return err
		}
		st, err := openStore(ctx, storeURL)
		if err != nil {
			return err
		}
		defer st.Close()
		where := storeurl.Redact(st.URL())
		cfg.Timeout = a.timeout
		// What goes, by run prefix and reason, in key order.
		type group struct {
			prefix, why string
			n           int
			bytes       int64
		}
		var groups []*group
		cfg.Foreign = func(prefix, why string, n int, bytes int64) {
			fmt.Fprintf(a.stdout, "foreign, left alone: %d object(s), %d byte(s), under %s: %s\n", n, bytes, prefix, why)
		}
		cfg.Removing = func(o store.Object, why string) {
			prefix := runs.RunPrefixOf(o.Key)
			if prefix == "" {
				prefix = o.Key
			}
			if n := len(groups); n == 0 || groups[n-1].prefix != prefix || groups[n-1].why != why {
				groups = append(groups, &group{prefix: prefix, why: why})
			}
			g := groups[len(groups)-1]
			g.n++
			g.bytes += o.Size
		}
		res, err := runs.Sweep(ctx, c, st, cfg)
		if errors.Is(err, runs.ErrAmbiguousStore) {
			return fmt.Errorf("%w\nIf one of those stores is %s spelled otherwise, run gc with --store spelled as that run's store is named above; "+
				"if each is another store, run gc again with --distinct-from URL for each", err, where)
		}
		if err != nil {
			return err
		}
		verb := "removed"
		if cfg.DryRun {
			verb = "would remove"
		}
		for _, g := range groups {
			fmt.Fprintf(a.stdout, "%s %d object(s), %d byte(s), under %s: %s\n", verb, g.n, g.bytes, g.prefix, g.why)
		}
		what := "swept"
		switch {
		case !yes && !cmd.Flags().Changed("dry-run"):
			what = "would sweep (nothing removed; --yes removes)"
		case cfg.DryRun:
			what = "would sweep (--dry-run)"
		}
		fmt.Fprintf(a.stdout, "%s %s: %s\n", what, where, res)
		// The OpenAI Batch API gateway's files that never became visible
		// (a gateway killed mid-upload), when the store is a gateway's.
		gres, err := gateway.CollectGarbage(ctx, st, cfg.Grace, time.Now(), cfg.DryRun)
		if err != nil {
			return err
		}
		if gres != (gateway.GCResult{}) {
			fmt.Fprintf(a.stdout, "%s %s: %s\n", what, where, gres)
		}
		return nil
	})
	return cmd
}

// requireAdmin refuses what flag asks unless the CLI's certificate has role
// admin (an insecure CLI has none).
func (a *app) requireAdmin(flag string) error {
	if a.tlsSrc == nil {
		return usagef("%s needs an admin certificate (--tls-cert of role admin); --insecure has none", flag)
	}
	id, err := mtls.IdentityOf(a.tlsSrc.Current().Leaf)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	if id.Role != mtls.RoleAdmin {
		return usagef("%s needs an admin certificate: --tls-cert %q has role %s", flag, id.Name, id.Role)
	}
	return nil
}
