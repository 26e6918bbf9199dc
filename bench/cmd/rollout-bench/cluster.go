package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// Client identities the harness uses as workers of its own (probe, steal).
var harnessWorkers = []string{"bench-probe", "bench-thief", "bench-victim"}

// startCluster starts a 3-replica cluster of the real binaries in a fresh
// directory named name. The caller stops it (cl.Stop) on every path.
func (b *bench) startCluster(ctx context.Context, name string, coordArgs ...string) (*localcluster.Cluster, string, error) {
	return b.startClusterMetrics(ctx, name, b.cfg.profileDir != "", coordArgs...)
}

// startClusterMetrics is startCluster with the replicas' --metrics-addr
// on (Replica.MetricsAddr) when metrics is true.
func (b *bench) startClusterMetrics(ctx context.Context, name string, metrics bool, coordArgs ...string) (*localcluster.Cluster, string, error) {
	dir, err := b.stageDir(name)
	if err != nil {
		return nil, "", err
	}
	cl, err := localcluster.Start(ctx, localcluster.Config{
		BinDir:       b.cfg.bin,
		Dir:          dir,
		Replicas:     3,
		TLS:          b.cfg.tls,
		TLSNames:     harnessWorkers,
		CertWorkers:  64,
		CoordArgs:    coordArgs,
		StartTimeout: b.cfg.startTimeout,
		Pprof:        b.cfg.profileDir != "",
		Metrics:      metrics,
	})
	if err != nil {
		return nil, "", fmt.Errorf("cluster %s: %w", name, err)
	}
	return cl, dir, nil
}

// client returns a coordinator client with the identity name ("cli" or one
// of harnessWorkers).
func client(cl *localcluster.Cluster, name string, callTimeout time.Duration) (*coordclient.Client, error) {
	cc := coordclient.DefaultConfig()
	cc.Addrs = cl.GRPCAddrs()
	cc.CallTimeout = callTimeout
	t, err := cl.TLSConfig(name)
	if err != nil {
		return nil, err
	}
	cc.TLS = t
	return coordclient.New(cc)
}

// startWorkers starts n mock workers w1..wn with the given concurrency and
// latency.
func startWorkers(cl *localcluster.Cluster, n, concurrency int, latency time.Duration, extra ...string) ([]*localcluster.Worker, error) {
	var out []*localcluster.Worker
	for i := 1; i <= n; i++ {
		args := []string{"--backend", "mock", "--concurrency", strconv.Itoa(concurrency), "--mock-latency", latency.String()}
		if i == 1 {
			args = append(args, extra...)
		}
		w, err := cl.StartWorker(fmt.Sprintf("w%d", i), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// inputFile writes (once) a JSONL file of n small prompts and returns its
// path.
func (b *bench) inputFile(n int, tag string) (string, error) {
	path := filepath.Join(b.cfg.dir, "inputs", fmt.Sprintf("%s-%d.jsonl", tag, n))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "{\"prompt\":\"%s item %09d: say something short\"}\n", tag, i)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// storeFlag is the rollout CLI's --store for a cluster whose stage
// directory is dir: a file store in DIR/store, so that a run's inputs and
// results stay with the stage (the CLI's default store is in the user's
// cache directory) and leave with it.
func storeFlag(dir string) string {
	return "--store=file://" + filepath.ToSlash(filepath.Join(dir, "store"))
}

// cliResult is one run of the rollout CLI.
type cliResult struct {
	Wall time.Duration
	CPU  time.Duration // user + system, from the child's rusage
}

// runCLI runs the rollout CLI against the cluster with the "cli" identity.
func (b *bench) runCLI(ctx context.Context, cl *localcluster.Cluster, args ...string) (cliResult, error) {
	argv := []string{args[0], "--coord", cl.CoordFlag()}
	argv = append(argv, cl.TLSArgs("cli")...)
	argv = append(argv, args[1:]...)
	argv = append(argv, b.layoutArgs(args[0])...)
	cmd := exec.CommandContext(ctx, filepath.Join(b.cfg.bin, "rollout"), argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = childAttr()
	start := time.Now()
	err := cmd.Run()
	r := cliResult{Wall: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		r.CPU = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		tail := out.Bytes()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return r, fmt.Errorf("rollout %v: %w\n%s", args, err, tail)
	}
	return r, nil
}

// layoutArgs are the extra flags of a CLI command for --layout: --items
// for a submit when the layout is "items".
func (b *bench) layoutArgs(cmd string) []string {
	if cmd == "submit" && b.cfg.layout == "items" {
		return []string{"--items"}
	}
	return nil
}

// submit submits the file as run through the library (as the CLI does),
// with its payloads inline (no store: the raw API's way, which the
// control-plane stages that use it, failover and steal, measure).
func submit(ctx context.Context, c *coordclient.Client, run, file string) error {
	return submitTo(ctx, c, run, file, nil)
}

// submitTo is submit with the run's data in st when st is not nil: a run
// made of ranges (runs.DefaultLayout).
func submitTo(ctx context.Context, c *coordclient.Client, run, file string, st *store.Store) error {
	scfg := runs.DefaultSubmitConfig()
	scfg.Run, scfg.Files, scfg.Timeout, scfg.Invalid, scfg.Store = run, []string{file}, 30*time.Second, io.Discard, st
	_, err := runs.Submit(ctx, c, scfg)
	return err
}

// layoutName names the layout of --layout l: "ranges" or "items".
func layoutName(l string) string {
	if l == "items" {
		return "items"
	}
	return "ranges"
}

// stageStore opens the file store of a stage's directory (storeFlag's).
func stageStore(ctx context.Context, dir string) (*store.Store, error) {
	return store.Open(ctx, "file://"+filepath.ToSlash(filepath.Join(dir, "store")), store.DefaultOptions())
}

// totals sums the counters of every run.
type totals struct {
	done, pending, running, total uint64
	term                          uint64
}

func runTotals(ctx context.Context, c *coordclient.Client, timeout time.Duration) (totals, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
	if err != nil {
		return totals{}, err
	}
	t := totals{term: resp.GetHeader().GetTerm()}
	for _, r := range resp.GetRuns() {
		t.done += r.GetDone()
		t.pending += r.GetPending()
		t.running += r.GetRunning()
		t.total += r.GetTotal()
	}
	return t, nil
}

// replicaView returns what the replica says about itself, or nil.
func replicaView(ctx context.Context, cl *localcluster.Cluster, id string) *rolloutv1.ClusterResponse {
	for _, v := range cl.Views(ctx) {
		if v.Replica.ID == id {
			return v.Resp
		}
	}
	return nil
}

// waitCaughtUp waits until replica id has applied everything the serving
// leader had committed when the wait began, and returns how long that took.
func waitCaughtUp(ctx context.Context, cl *localcluster.Cluster, id string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	leader, _, err := cl.WaitLeader(ctx)
	if err != nil {
		return 0, err
	}
	lv := replicaView(ctx, cl, leader.ID)
	if lv == nil {
		return 0, fmt.Errorf("leader %s does not answer", leader.ID)
	}
	target := lv.GetCommitIndex()
	for {
		if v := replicaView(ctx, cl, id); v != nil && v.GetAppliedIndex() >= target &&
			v.GetState() == rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("replica %s did not catch up to index %d: %w", id, target, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// quantile returns the q-quantile (0..1) of ds by the nearest-rank rule.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
