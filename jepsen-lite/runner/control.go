package runner

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/report"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// view is one replica's answer to Cluster.
type view struct {
	id   string
	resp *rolloutv1.ClusterResponse
}

// servingLeader is coordclient.ServingLeader over views: the serving
// leader's id and term, or "".
func servingLeader(vs []view) (string, uint64) {
	resps := make([]*rolloutv1.ClusterResponse, len(vs))
	for i, v := range vs {
		resps[i] = v.resp
	}
	i := coordclient.ServingLeader(resps)
	if i < 0 {
		return "", 0
	}
	return vs[i].id, vs[i].resp.GetHeader().GetTerm()
}

// watcher polls every replica's Cluster view: it finds the serving leader,
// waits for failovers and records every new leader it sees.
type watcher struct {
	c      *localcluster.Cluster
	client *coordclient.Client
	hist   *history.Writer
	start  int64

	mu      sync.Mutex
	leaders []report.Leader
	seen    map[uint64]bool
}

// newWatcher returns a watcher of c whose client presents tlsConf (nil:
// plaintext).
func newWatcher(c *localcluster.Cluster, tlsConf *tls.Config, hist *history.Writer, start int64) (*watcher, error) {
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.GRPCAddrs()
	cc.CallTimeout = 400 * time.Millisecond
	cc.TLS = tlsConf
	client, err := coordclient.New(cc)
	if err != nil {
		return nil, err
	}
	return &watcher{c: c, client: client, hist: hist, start: start, seen: map[uint64]bool{}}, nil
}

func (w *watcher) close() { _ = w.client.Close() }

// views asks every replica at once.
func (w *watcher) views(ctx context.Context) []view {
	out := make([]*view, len(w.c.Replicas))
	var wg sync.WaitGroup
	for i, r := range w.c.Replicas {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			resp, err := w.client.Cluster(cctx, r.GRPCAddr)
			if err != nil {
				return
			}
			out[i] = &view{id: r.ID, resp: resp}
		})
	}
	wg.Wait()
	var vs []view
	for _, v := range out {
		if v != nil {
			vs = append(vs, *v)
		}
	}
	return vs
}

// serving returns the leader with the highest term among views that serve
// (their epoch entry applied), or "".
func (w *watcher) serving(vs []view) (string, uint64) {
	id, term := servingLeader(vs)
	if id != "" {
		w.note(id, term)
	}
	return id, term
}

// note records a leader the first time its term is seen.
func (w *watcher) note(id string, term uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[term] {
		return
	}
	w.seen[term] = true
	now := history.Now()
	w.leaders = append(w.leaders, report.Leader{Term: term, ID: id, At: float64(now-w.start) / 1e9})
	w.hist.Write(history.Event{Time: now, Type: history.TypeInfo, Op: "leader", Term: term, Detail: id})
}

// Leaders returns the leaders seen, by term.
func (w *watcher) Leaders() []report.Leader {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.leaders)
	slices.SortFunc(out, func(a, b report.Leader) int { return int(a.Term) - int(b.Term) })
	return out
}

// run polls until ctx ends, noting leaders.
func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.serving(w.views(ctx))
		workload.Sleep(ctx, 200*time.Millisecond)
	}
}

// leader waits for a serving leader.
func (w *watcher) leader(ctx context.Context) (string, uint64, error) {
	for {
		if id, term := w.serving(w.views(ctx)); id != "" {
			return id, term, nil
		}
		if !workload.Sleep(ctx, 50*time.Millisecond) {
			return "", 0, fmt.Errorf("%w: %v", nemesis.ErrNoLeader, ctx.Err())
		}
	}
}

// waitNew waits for a leader other than old in a term above term.
func (w *watcher) waitNew(ctx context.Context, old string, term uint64) (string, uint64, error) {
	for {
		vs := w.views(ctx)
		w.serving(vs)
		newer := slices.DeleteFunc(slices.Clone(vs), func(v view) bool { return v.id == old || v.resp.GetHeader().GetTerm() <= term })
		if id, best := servingLeader(newer); id != "" {
			return id, best, nil
		}
		if !workload.Sleep(ctx, 50*time.Millisecond) {
			return "", 0, fmt.Errorf("%w: no new leader: %v", nemesis.ErrNoLeader, ctx.Err())
		}
	}
}

// control is the nemesis' view of the cluster.
type control struct {
	c   *localcluster.Cluster
	net fabric
	w   *watcher
}

var _ nemesis.Cluster = (*control)(nil)

func (k *control) proc(node string) (*localcluster.Proc, error) {
	if r := k.c.Replica(node); r != nil {
		return r.Proc, nil
	}
	for _, w := range k.c.Workers() {
		if w.ID == node {
			return w.Proc, nil
		}
	}
	return nil, fmt.Errorf("%w: no process %q", ErrHarness, node)
}

func (k *control) Leader(ctx context.Context) (string, uint64, error) { return k.w.leader(ctx) }

func (k *control) WaitNewLeader(ctx context.Context, old string, term uint64) (string, uint64, error) {
	return k.w.waitNew(ctx, old, term)
}

func (k *control) Kill(node string) error {
	p, err := k.proc(node)
	if err != nil {
		return err
	}
	return p.Kill()
}

// drainGrace bounds a drained worker's exit (its --drain-timeout is 2s).
const drainGrace = 15 * time.Second

// Drain SIGTERMs worker node and waits until it exited (SIGKILL after
// drainGrace).
func (k *control) Drain(node string) error {
	for _, w := range k.c.Workers() {
		if w.ID == node {
			return w.Stop(drainGrace)
		}
	}
	return fmt.Errorf("%w: no worker %q", ErrHarness, node)
}

func (k *control) Restart(node string) error {
	if r := k.c.Replica(node); r != nil {
		return r.Restart()
	}
	for _, w := range k.c.Workers() {
		if w.ID == node {
			return w.Restart()
		}
	}
	return fmt.Errorf("%w: no process %q", ErrHarness, node)
}

func (k *control) Pause(node string) error {
	p, err := k.proc(node)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGSTOP)
}

func (k *control) Resume(node string) error {
	p, err := k.proc(node)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGCONT)
}

func (k *control) Cut(ctx context.Context, links []network.Link) error { return k.net.Cut(ctx, links) }

func (k *control) Heal(ctx context.Context) error { return k.net.Heal(ctx) }

// processes names the live processes by pid (for the proxy).
func processes(c *localcluster.Cluster) map[int]string {
	out := map[int]string{}
	for _, r := range c.Replicas {
		if pid := r.Pid(); pid > 0 {
			out[pid] = r.ID
		}
	}
	for _, w := range c.Workers() {
		if pid := w.Pid(); pid > 0 {
			out[pid] = w.ID
		}
	}
	return out
}
