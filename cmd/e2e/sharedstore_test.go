package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

var clusterIDLine = regexp.MustCompile(`(?m)^cluster id: ([0-9a-f]{32})$`)

// clusterID is the identity `rollout cluster` prints for c.
func clusterID(t *testing.T, c *localcluster.Cluster) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		out, err := cli(t, c, "cluster")
		if m := clusterIDLine.FindStringSubmatch(out); err == nil && m != nil {
			id = m[1]
			return true
		}
		return false
	}, time.Minute, 200*time.Millisecond, "rollout cluster prints no cluster id")
	return id
}

// checkResults requires `rollout results` of run on c to give one line per
// input line, each the mock's result.
func checkResults(t *testing.T, c *localcluster.Cluster, run string, lines []map[string]any) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.jsonl")
	msg, err := cli(t, c, "results", "--run", run, "-o", out)
	require.NoError(t, err, msg)
	checkOutput(t, out, lines)
}

// dirsUnder lists the directories under root (relative), to find empty
// ones.
func emptyDirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == root {
			return err
		}
		ents, err := os.ReadDir(p)
		if err == nil && len(ents) == 0 {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	}))
	return out
}

// TestTwoClustersShareAStore: two real 3-replica clusters (their own data
// directories and CAs) on one file store, each with a finished run of the
// same name, and cluster A with a run in the layout before cluster
// identities (runs/NAME/). Each cluster's gc --dry-run lists the other's
// prefix as foreign; gc --yes on each, then delete on each, leave the
// other's run exact (every line one result) and no empty directory; the
// legacy run's objects stay; --remove-foreign with a client certificate is
// refused; a payload_ref outside the run's input prefix is refused by the
// coordinator (SubmitRanges and SubmitItems), naming the key and the
// prefix.
func TestTwoClustersShareAStore(t *testing.T) {
	const n = 60
	a, b := startCluster(t), startCluster(t)
	dir := t.TempDir()
	storeURL := "file://" + dir
	idA, idB := clusterID(t, a), clusterID(t, b)
	require.NotEqual(t, idA, idB, "two clusters, two identities")
	out, err := cli(t, a, "cluster")
	require.NoError(t, err, out)
	require.Equal(t, idA, clusterIDLine.FindStringSubmatch(out)[1], "the identity is fixed")

	input, lines := writeInput(t, n)
	for _, c := range []*localcluster.Cluster{a, b} {
		_, err := c.StartWorker("w1", "--backend", "mock")
		require.NoError(t, err)
		out, err := cli(t, c, "submit", "--input", input, "--run", "same", "--store", storeURL)
		require.NoError(t, err, out)
	}
	waitDone(t, a, "same", n, 2*time.Minute, nil)
	waitDone(t, b, "same", n, 2*time.Minute, nil)
	prefixA := "clusters/" + idA + "/runs/same/"
	prefixB := "clusters/" + idB + "/runs/same/"
	st, err := store.Open(context.Background(), storeURL, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	count := func(prefix string) int {
		k := 0
		require.NoError(t, st.List(context.Background(), prefix, func(store.Object) error { k++; return nil }))
		return k
	}
	require.Positive(t, count(prefixA))
	require.Positive(t, count(prefixB))

	// A run through the raw API in the layout before identities (no
	// data_prefix: runs/legacy/), on A.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := a.Client()
	require.NoError(t, err)
	defer client.Close()
	items := make([]*rolloutv1.SubmitItem, 3)
	for i := range items {
		id := make([]byte, 32)
		_, _ = rand.Read(id)
		p, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("legacy %d", i)})
		items[i] = &rolloutv1.SubmitItem{Id: id, Index: uint64(i), Payload: p}
	}
	_, _, err = runs.StorePayloads(ctx, st, "legacy", items)
	require.NoError(t, err)
	_, err = client.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "legacy", Spec: &rolloutv1.RunSpec{Store: st.URL(), Total: 3}, Items: items})
	require.NoError(t, err)
	// A's worker runs it; its results go under runs/legacy/results/.
	waitDone(t, a, "legacy", 3, 2*time.Minute, nil)
	legacyObjects := count("runs/legacy/")
	require.Positive(t, count("runs/legacy/results/"), "the worker wrote the legacy run's results under its own prefix")
	require.Positive(t, legacyObjects)

	// A payload_ref outside the run's input prefix: refused, naming both.
	var chunk string
	require.NoError(t, st.List(ctx, prefixA, func(o store.Object) error {
		if strings.Contains(o.Key, "/inputs/") && chunk == "" {
			chunk = o.Key
		}
		return nil
	}))
	require.NotEmpty(t, chunk)
	for _, obj := range []string{chunk, "secret/keys"} {
		_, err = client.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "evil", Spec: &rolloutv1.RunSpec{Store: st.URL(), Total: 1},
			Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 1, PayloadRef: &rolloutv1.DataRef{Object: obj, Length: 10}}}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", obj, err)
		require.Contains(t, err.Error(), obj)
		require.Contains(t, err.Error(), "runs/evil/inputs/")
	}
	legacyItem := &rolloutv1.SubmitItem{Id: items[0].GetId(), Index: 5, PayloadRef: &rolloutv1.DataRef{Object: chunk, Length: 10}}
	_, err = client.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "evil2", Spec: &rolloutv1.RunSpec{Store: st.URL(), Total: 1},
		Items: []*rolloutv1.SubmitItem{legacyItem}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), chunk)

	// B's gc lists A's run and the legacy prefix as foreign, removes
	// nothing of them, with --yes too.
	out, err = cli(t, b, "gc", "--store", storeURL, "--grace", "1ns", "--dry-run")
	require.NoError(t, err, out)
	require.Regexp(t, `foreign, left alone: \d+ object\(s\), \d+ byte\(s\), under `+regexp.QuoteMeta(prefixA)+`[0-9a-f]{32}/: written by another cluster`, out)
	require.Contains(t, out, "under runs/legacy/: "+runs.ForeignLegacy)
	out, err = cliAs(t, b, "cli", "gc", "--store", storeURL, "--grace", "1ns", "--yes", "--remove-foreign", "runs/legacy/")
	require.Error(t, err, out)
	require.Contains(t, out, "needs an admin certificate")
	out, err = cli(t, b, "gc", "--store", storeURL, "--grace", "1ns", "--yes")
	require.NoError(t, err, out)
	require.Equal(t, legacyObjects, count("runs/legacy/"))
	checkResults(t, a, "same", lines)

	// A's gc: B's run stays exact; A's legacy run (live in A's ledger) stays.
	out, err = cli(t, a, "gc", "--store", storeURL, "--grace", "1ns", "--yes")
	require.NoError(t, err, out)
	require.Contains(t, out, prefixB)
	require.Equal(t, legacyObjects, count("runs/legacy/"))
	checkResults(t, b, "same", lines)

	// Delete on B removes B's prefix only, leaving no empty directory.
	out, err = cli(t, b, "delete", "--run", "same")
	require.NoError(t, err, out)
	require.Contains(t, out, "under "+prefixB)
	require.Zero(t, count(prefixB))
	checkResults(t, a, "same", lines)
	require.Empty(t, emptyDirs(t, dir))
	_, err = os.Stat(filepath.Join(dir, "clusters", idB))
	require.ErrorIs(t, err, os.ErrNotExist, "B's whole directory went with its only run")

	// Delete on A: its run's prefix goes, the legacy run's stays.
	out, err = cli(t, a, "delete", "--run", "same")
	require.NoError(t, err, out)
	require.Zero(t, count(prefixA))
	require.Equal(t, legacyObjects, count("runs/legacy/"))
	require.Empty(t, emptyDirs(t, dir))
}
