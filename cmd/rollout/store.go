package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// storeEnv names the environment variable that gives --store's default.
const storeEnv = "ROLLOUT_STORE"

// errNoDefaultStore means neither --store nor $ROLLOUT_STORE was given and
// the default store's directory (in the user's cache directory) cannot be
// written: a read-only root file system (a container image), or a home
// directory that is not this user's. Nothing was sent to the cluster.
var errNoDefaultStore = errors.New("no --store given (nor $" + storeEnv + ") and the default store cannot be written")

// checkDefaultStore makes dir, the default store's directory, and writes
// (and removes) a file in it; the error matches errNoDefaultStore and
// tells the user to give --store.
func checkDefaultStore(dir string) error {
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".write-check-*"); err == nil {
			name := f.Name()
			err = f.Close()
			if rerr := os.Remove(name); err == nil {
				err = rerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v: give --store (or set $%s) naming a store every worker can reach, "+
			"e.g. s3://BUCKET?endpoint=http://HOST:PORT&region=us-east-1&use_path_style=true", errNoDefaultStore, dir, err, storeEnv)
	}
	return nil
}

// defaultStoreURL is --store's default without a cluster to ask:
// $ROLLOUT_STORE, else a directory in the user's cache directory (workers
// on this machine can read it; a cluster of several machines needs a
// shared store: s3://, gs://, or a shared directory). Commands that talk
// to a cluster use resolveStore: one directory per cluster.
func defaultStoreURL() string {
	if u := os.Getenv(storeEnv); u != "" {
		return u
	}
	return "file://" + filepath.ToSlash(defaultStoreDir())
}

// defaultStoreDir is the cache directory's rollout/store.
func defaultStoreDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "rollout", "store")
}

// clusterStoreURL is the default store of the cluster with identity id: a
// directory of its own, rollout/store/ID in the cache directory, so that
// two clusters of one user never share their default store.
func clusterStoreURL(id string) string {
	return "file://" + filepath.ToSlash(filepath.Join(defaultStoreDir(), id))
}

// resolveStore is the store a command that talks to the cluster c uses:
// raw when given, else $ROLLOUT_STORE, else the store run (when not "")
// recorded when the cluster holds it with one (a run keeps its store),
// else the cluster's own default directory (clusterStoreURL).
func (a *app) resolveStore(ctx context.Context, c runs.Coordinator, raw, run string) (string, error) {
	if raw != "" {
		return raw, nil
	}
	if u := os.Getenv(storeEnv); u != "" {
		return u, nil
	}
	if run != "" {
		_, rc, err := runs.Status(ctx, c, run, a.timeout)
		switch {
		case err == nil && rc.GetStore() != "":
			return rc.GetStore(), nil
		case err != nil && !errors.Is(err, runs.ErrRunNotFound):
			return "", err
		}
	}
	id, err := runs.ClusterID(ctx, c, a.timeout)
	if err != nil {
		return "", fmt.Errorf("choosing the cluster's default store (give --store or $%s to choose one): %w", storeEnv, err)
	}
	if err := checkDefaultStore(filepath.Join(defaultStoreDir(), id)); err != nil {
		return "", err
	}
	return clusterStoreURL(id), nil
}

// addStoreFlag adds --store to cmd.
func addStoreFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "store", "", "object store URL for the run's inputs and results: file:///DIR, s3://BUCKET?region=R "+
		"(S3-compatible: s3://BUCKET?endpoint=http://HOST:PORT&region=us-east-1&use_path_style=true), gs://BUCKET, azblob://CONTAINER; "+
		"credentials come from the environment (default $"+storeEnv+", else a directory in your cache directory)")
}

// openStore opens the store named by raw (its default when empty), making
// a relative file path absolute; it returns the store and its URL as the
// run records it.
func openStore(ctx context.Context, raw string) (*store.Store, error) {
	if raw == "" {
		if os.Getenv(storeEnv) == "" {
			if err := checkDefaultStore(defaultStoreDir()); err != nil {
				return nil, err
			}
		}
		raw = defaultStoreURL()
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme == "" {
		// A plain directory: the file store there.
		abs, err := filepath.Abs(raw)
		if err != nil {
			return nil, err
		}
		raw = "file://" + filepath.ToSlash(abs)
	}
	st, err := store.Open(ctx, raw, store.DefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return st, nil
}

// openRunStore opens the store a run records (nil when its data is
// inline).
func openRunStore(ctx context.Context, rc *rolloutv1.RunCounters) (*store.Store, error) {
	if rc.GetStore() == "" {
		return nil, nil
	}
	st, err := store.Open(ctx, rc.GetStore(), store.DefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("run %q keeps its data in %s, which cannot be opened: %w", rc.GetName(), storeurl.Redact(rc.GetStore()), err)
	}
	return st, nil
}

// storeObjectURL splits an object URL such as
// s3://bucket/out/results.jsonl?region=... into the store's URL
// (s3://bucket?region=...) and the object's key (out/results.jsonl). ok is
// false for anything that is not a bucket URL (a local path, file://).
func storeObjectURL(raw string) (storeURL, key string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", "", false
	}
	switch u.Scheme {
	case "s3", "gs", "azblob", "mem":
	default:
		return "", "", false
	}
	key = strings.TrimPrefix(u.Path, "/")
	u.Path, u.RawPath = "", ""
	return u.String(), key, key != ""
}
