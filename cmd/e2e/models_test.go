package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
)

// writeModelRun writes a run config named name for model with n prompt
// lines as its input, and returns the config's path.
func writeModelRun(t *testing.T, name, model string, n int) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "in"), 0o755))
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"prompt":"%s prompt %d","row":%d}`+"\n", name, i, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in", "a.jsonl"), []byte(lines.String()), 0o644))
	cfg := fmt.Sprintf(`name = %q
[model]
uri = %q

[sampling]
temperature = 0
top_p       = 1
max_tokens  = 8

[input]
glob = "in/*.jsonl"

[output]
dir = "out"
`, name, model)
	path := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return path
}

// TestModelsRouteToTheirWorkers runs two models side by side on one
// cluster: two runs of different models, two mock workers each serving one
// of them (rollout-worker --models). Both runs finish, and every item of
// each run was completed by the worker serving its model (the ledger
// records the last owner of a Done item), stealing included. A third run,
// of a model nobody serves, reports unserved_model in RunStatus and in
// `rollout status`, stays active with all its items pending while the
// others finish, and finishes once a worker serving its model registers.
func TestModelsRouteToTheirWorkers(t *testing.T) {
	const n = 80
	c := startCluster(t)
	for _, w := range []struct{ id, model string }{{"w1", "model-a"}, {"w2", "model-b"}} {
		_, err := c.StartWorker(w.id, "--backend", "mock", "--models", w.model, "--concurrency", "4", "--mock-latency", "10ms", "--mock-jitter", "20ms")
		require.NoError(t, err)
	}
	owner := map[string]string{"run-a": "w1", "run-b": "w2"}
	for run, model := range map[string]string{"run-a": "model-a", "run-b": "model-b", "run-c": "model-c"} {
		items := n
		if run == "run-c" {
			items = 5
		}
		out, err := cli(t, c, "submit", "--config", writeModelRun(t, run, model, items))
		require.NoError(t, err, out)
	}

	// run-c waits for a worker of model-c from the start, and stays
	// active with nothing claimed while the others run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc, err := runStatus(ctx, c, "run-c")
	require.NoError(t, err)
	require.Equal(t, "model-c", rc.GetModel())
	require.True(t, rc.GetUnservedModel(), "no worker serves model-c: %v", rc)

	for run := range owner {
		waitDone(t, c, run, n, 2*time.Minute, nil)
	}
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	for run, worker := range owner {
		rc, err := runStatus(ctx, c, run)
		require.NoError(t, err)
		require.Equal(t, uint64(n), rc.GetDone(), "run %s: %v", run, rc)
		require.False(t, rc.GetUnservedModel(), "run %s", run)
		items := allResults(t, ctx, client, run)
		require.Len(t, items, n)
		for _, it := range items {
			require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, it.GetState(), "run %s item %d", run, it.GetIndex())
			require.Equal(t, worker, it.GetOwner(), "run %s item %d was completed by a worker that does not serve its model", run, it.GetIndex())
		}
	}

	rc, err = runStatus(ctx, c, "run-c")
	require.NoError(t, err)
	require.True(t, rc.GetUnservedModel(), "%v", rc)
	require.Zero(t, rc.GetFinishedUnixMs(), "an unserved run does not finish")
	require.Equal(t, uint64(5), rc.GetPending())
	require.Zero(t, rc.GetDone()+rc.GetDead()+rc.GetRunning()+rc.GetFailures(), "%v", rc)

	status, err := client.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	models := map[string][]string{}
	for _, ws := range status.GetWorkers() {
		models[ws.GetId()] = ws.GetModels()
	}
	require.Equal(t, map[string][]string{"w1": {"model-a"}, "w2": {"model-b"}}, models)

	out, err := cli(t, c, "status")
	require.NoError(t, err, out)
	require.Regexp(t, `run-c\s+cli\s+3\s+-\s+5\s+5\s+.*waiting: no live worker serves model model-c`, out)
	require.Regexp(t, `w1\s+batch\s+model-a\s`, out)

	// A worker for model-c arrives: run-c runs and finishes on it.
	_, err = c.StartWorker("w3", "--backend", "mock", "--models", "model-c,model-d", "--mock-latency", "1ms")
	require.NoError(t, err)
	rc = waitDone(t, c, "run-c", 5, time.Minute, nil)
	require.False(t, rc.GetUnservedModel())
	for _, it := range allResults(t, ctx, client, "run-c") {
		require.Equal(t, "w3", it.GetOwner())
		require.Equal(t, batch.EncodeCompletionResult("MOCK:run-c prompt "+fmt.Sprint(it.GetIndex()), "stop"), it.GetResult())
	}
}
