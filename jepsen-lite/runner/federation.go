package runner

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/workload"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// The federation scenario: a parent cluster (fedParent, started with
// --cluster-name and --peers) hands whole runs to a peer cluster (fedPeer,
// the only one with workers). Network nodes a1..a3 are the parent's
// replicas, b1..b3 the peer's, w1 and w2 the peer's workers.
const (
	fedParent = "a"
	fedPeer   = "b"
)

// The federation scenario's runs, all of the model the peer's workers
// serve (workload.ItemModel): handed off by model (auto; fed-cancel is
// created right after the parent's leader was killed, so its new leader
// must poll the peer before it decides), pinned to the peer, cancelled
// during a partition, and pinned local.
const (
	fedAuto1  = "fed-1"
	fedAuto2  = "fed-2"
	fedPinned = "fed-pin"
	fedCancel = "fed-cancel"
	fedLocal  = "loc-1"
)

// fedShape is the federation scenario's network: both clusters' replicas,
// the peer's workers.
func fedShape() shape {
	var s shape
	for _, c := range []string{fedParent, fedPeer} {
		for i := 1; i <= 3; i++ {
			s.replicas = append(s.replicas, c+strconv.Itoa(i))
		}
	}
	s.workers = []string{"w1", "w2"}
	return s
}

// clusterPlacement places one cluster's replicas ("c1".. in
// localcluster) on the network nodes PREFIX1..; workers keep their ids.
type clusterPlacement struct {
	inner  localcluster.Placement
	prefix string
}

func (p clusterPlacement) node(id string) string {
	if rest, ok := strings.CutPrefix(id, "c"); ok {
		if _, err := strconv.Atoi(rest); err == nil {
			return p.prefix + rest
		}
	}
	return id
}

func (p clusterPlacement) ReplicaAddrs(id string) (localcluster.ReplicaAddrs, error) {
	return p.inner.ReplicaAddrs(p.node(id))
}

func (p clusterPlacement) Command(name, bin string, args []string) []string {
	return p.inner.Command(p.node(name), bin, args)
}

// fedState is the federation scenario's state beside the harness's: the
// parent cluster (the harness's c is the peer, where the items live).
type fedState struct {
	parent   *localcluster.Cluster
	parentW  *watcher
	stores   *runStores
	storeURL string
	// clusterID is the parent's identity (its runs' data prefixes).
	clusterID string

	mu           sync.Mutex
	observations []checker.FedObservation
	cancels      []string
	remote       map[string]string // parent run -> remote run, as the parent listed it
	peerSeen     map[string]bool   // runs under the parent's prefix the peer ever listed
	input        checker.FedInput
}

// fedNodes returns the network node names of a cluster's replicas.
func fedNodes(prefix string) []string {
	return []string{prefix + "1", prefix + "2", prefix + "3"}
}

// startFederation starts the peer (with its peer certificate for the
// parent), the runs' store and the parent with its peers file.
func (h *harness) startFederation(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	base := h.coordArgs()
	b, err := localcluster.Start(sctx, localcluster.Config{
		BinDir: h.cfg.BinDir, Dir: filepath.Join(h.cfg.OutDir, "cluster"), Replicas: 3,
		CoordArgs: append(slices.Clone(base), "--cluster-name", fedPeer), Placement: clusterPlacement{h.net, fedPeer},
		StartTimeout: 80 * time.Second, TLS: h.cfg.TLS, TLSNames: h.shape.workers,
	})
	if err != nil {
		return fmt.Errorf("%w: starting the peer cluster %s: %v", ErrHarness, fedPeer, err)
	}
	h.c = b
	h.fed = &fedState{remote: map[string]string{}, peerSeen: map[string]bool{}}
	// The parent's identity on the peer: a peer certificate from the
	// peer's CA, named after the parent.
	if err := mtls.IssueCerts(b.TLSDir(), []mtls.Cert{{Name: fedParent, Role: mtls.RolePeer}}, nil, 24*time.Hour); err != nil {
		return fmt.Errorf("%w: issuing the peer certificate %s from %s's CA: %v", ErrHarness, fedParent, fedPeer, err)
	}
	rs, note, err := startStores(ctx, h.log, filepath.Join(h.cfg.OutDir, "store"), storeHost(h.net), noS3, h.cfg.BinDir, fedRuns())
	if err != nil {
		return err
	}
	if note != "" {
		h.note("%s", note)
	}
	h.fed.stores = rs
	h.fed.storeURL = rs.byRun[fedAuto1].URL()
	files := mtls.FilesFor(b.TLSDir(), fedParent)
	peersFile := filepath.Join(h.cfg.OutDir, "peers.toml")
	var coord []string
	for _, a := range b.GRPCAddrs() {
		coord = append(coord, strconv.Quote(a))
	}
	toml := fmt.Sprintf("[[peer]]\nname = %q\ncoord = [%s]\ntls_ca = %q\ntls_cert = %q\ntls_key = %q\nstores = [%q]\n",
		fedPeer, strings.Join(coord, ", "), files.CA, files.Cert, files.Key, h.fed.storeURL)
	if err := os.WriteFile(peersFile, []byte(toml), 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	a, err := localcluster.Start(sctx, localcluster.Config{
		BinDir: h.cfg.BinDir, Dir: filepath.Join(h.cfg.OutDir, "cluster-"+fedParent), Replicas: 3,
		CoordArgs: append(slices.Clone(base), "--cluster-name", fedParent, "--peers", peersFile), Placement: clusterPlacement{h.net, fedParent},
		StartTimeout: 80 * time.Second, TLS: h.cfg.TLS,
	})
	if err != nil {
		return fmt.Errorf("%w: starting the parent cluster %s: %v", ErrHarness, fedParent, err)
	}
	h.fed.parent = a
	if p, ok := h.net.(*network.Proxy); ok {
		p.SetProcesses(func() map[int]string {
			out := map[int]string{}
			for _, c := range []struct {
				c      *localcluster.Cluster
				prefix string
			}{{b, fedPeer}, {a, fedParent}} {
				for pid, name := range processes(c.c) {
					out[pid] = clusterPlacement{prefix: c.prefix}.node(name)
				}
			}
			return out
		})
	}
	return nil
}

// stopFederation stops the parent and the runs' store (the peer is the
// harness's cluster: stopCluster stops it) and keeps the parent's logs.
func (h *harness) stopFederation() {
	if h.fed == nil {
		return
	}
	if h.fed.parentW != nil {
		h.fed.parentW.close()
	}
	if h.fed.parent != nil {
		h.fed.parent.Stop()
	}
	if h.fed.stores != nil {
		h.fed.stores.close()
	}
}

// fedRuns are the scenario's runs, in the order they are submitted.
func fedRuns() []string { return []string{fedAuto1, fedLocal, fedAuto2, fedPinned, fedCancel} }

// fedExpect is where each run must end.
func fedExpect() map[string]string {
	return map[string]string{fedAuto1: fedPeer, fedAuto2: fedPeer, fedPinned: fedPeer, fedCancel: fedPeer, fedLocal: "local"}
}

// fedPin is each run's RunSpec.cluster ("" routes by model).
func fedPin(run string, s *rolloutv1.RunSpec) {
	switch run {
	case fedPinned:
		s.Cluster = fedPeer
	case fedLocal:
		s.Cluster = "local"
	}
}

// parentClient returns a sequential workload client named name on the
// parent cluster, presenting identity's certificate from the parent's CA.
func (h *harness) parentClient(name, identity string) (*workload.Client, error) {
	a := h.fed.parent
	cc := coordclient.DefaultConfig()
	tc, err := h.tlsConfigOf(a, identity)
	if err != nil {
		return nil, fmt.Errorf("client %s: %w", name, err)
	}
	cc.TLS = tc
	w, err := h.writer(name)
	if err != nil {
		return nil, err
	}
	cc.Addrs = a.GRPCAddrs()
	cc.CallTimeout = 3 * time.Second
	cc.RetryMin, cc.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	c, err := coordclient.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return workload.NewClient(c, w), nil
}

// fedSubmitters returns two submitters of run on the parent, "submit-RUN"
// and "dup-RUN", that submit the same chunks (the second one's submits
// are duplicated forwards of the first's).
func (h *harness) fedSubmitters(run string, items, chunk int, span time.Duration) ([]*workload.Submitter, error) {
	var out []*workload.Submitter
	for _, who := range []string{"submit-", "dup-"} {
		cl, err := h.parentClient(who+run, "cli")
		if err != nil {
			return nil, err
		}
		sub, err := workload.NewSubmitter(cl, workload.SubmitConfig{
			Runs: []string{run}, ItemsPerRun: items, ChunkSize: chunk, Span: span, MaxFailures: 10,
			Stores: h.fed.stores.byRun, Adjust: fedPin, DataPrefixes: map[string]string{run: h.fedDataPrefix(run)},
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		out = append(out, sub)
	}
	return out, nil
}

// fedDataPrefix is run's data prefix on the parent, as rollout submit
// makes one (the incarnation from the seed): the peer reads the inputs the
// harness stored under it, and the remote run keeps it.
func (h *harness) fedDataPrefix(run string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "jepsen-lite federation\x00%d\x00%s", h.cfg.Seed, run))
	return storeurl.DataPrefix(h.fed.clusterID, run, hex.EncodeToString(sum[:16]))
}

// fedEvent records a nemesis step of the scenario.
func fedEvent(hist *history.Writer, op, detail string, nodes ...string) {
	hist.Write(history.Event{Type: history.TypeNemesis, Op: op, Detail: detail, Nodes: nodes})
}

// fedRun converts a cluster's counters.
func fedRun(rc *rolloutv1.RunCounters) checker.FedRun {
	return checker.FedRun{
		Name: rc.GetName(), Cluster: rc.GetCluster(), RemoteRun: rc.GetRemoteRun(), State: rc.GetHandleState(),
		Origin: rc.GetOrigin(), Tenant: rc.GetTenant(),
		Total: rc.GetTotal(), Pending: rc.GetPending(), Running: rc.GetRunning(), Done: rc.GetDone(), Dead: rc.GetDead(),
		Cancelled: rc.GetCancelled(), Finished: rc.GetFinishedUnixMs() > 0,
	}
}

// federation runs the scenario: the workload on the parent, the peer's
// leader killed during a handoff, the parent's leader killed between a
// handle and its forward, two partitions between the clusters (a cancel
// acknowledged during the first), duplicated forwards throughout; then
// it waits for the peer to finish and the parent to converge, and reads
// both sides for the checkers.
func (h *harness) federation(ctx context.Context, nemHist *history.Writer) error {
	cfg := h.cfg
	fs := h.fed
	pw, err := h.tlsConfigOf(fs.parent, "cli")
	if err != nil {
		return err
	}
	watchHist, err := h.writer("watch-" + fedParent)
	if err != nil {
		return err
	}
	fs.parentW, err = newWatcher(fs.parent, pw, watchHist, h.start)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	for j, w := range h.shape.workers {
		if err := h.startWorker(w, "--models", workload.ItemModel, "--concurrency", "2", "--mock-latency", "40ms", "--mock-jitter", "40ms",
			"--mock-fail-rate", "0.05", "--mock-seed", strconv.FormatInt(cfg.Seed*100+int64(j), 10),
			"--claim-wait", "2s", "--heartbeat", "500ms", "--drain-timeout", "2s"); err != nil {
			return err
		}
	}
	if err := h.fedWaitPeer(ctx); err != nil {
		return err
	}
	items := cfg.ItemsPerRun
	span := cfg.Duration * 6 / 10
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	var wg sync.WaitGroup
	var subsMu sync.Mutex
	var subErrs []string
	pending := map[string]bool{}
	// start submits run from two clients; the wait after the last heal
	// waits for a tracked run's submits (the cancelled run's stop at the
	// cancel: a cancelled run takes no more items).
	start := func(ctx context.Context, run string, items, chunk int, span time.Duration, track bool) error {
		subs, err := h.fedSubmitters(run, items, chunk, span)
		if err != nil {
			return err
		}
		if track {
			subsMu.Lock()
			pending[run] = true
			subsMu.Unlock()
		}
		for i, s := range subs {
			wg.Go(func() {
				err := s.Run(ctx)
				if !track {
					return
				}
				subsMu.Lock()
				defer subsMu.Unlock()
				if err != nil {
					subErrs = append(subErrs, fmt.Sprintf("%s (submitter %d): %v", run, i, err))
				} else {
					delete(pending, run)
				}
			})
		}
		return nil
	}
	if err := start(wctx, fedAuto1, items, 25, span, true); err != nil {
		return err
	}
	if err := start(wctx, fedLocal, 50, 25, 0, true); err != nil {
		return err
	}
	obs, err := h.parentClient("fed-reader", "admin")
	if err != nil {
		return err
	}
	waiter, err := h.parentClient("fed-wait", "admin")
	if err != nil {
		return err
	}
	wg.Go(func() { h.fedObserve(wctx, obs) })
	peerObs, err := h.client("fed-peer-reader")
	if err != nil {
		return err
	}
	wg.Go(func() { h.fedObservePeer(wctx, peerObs) })

	// 1. The peer's leader killed, and a run handed off at once: the
	// handoff (the forward of its first submit) meets the election.
	if !workload.Sleep(ctx, 2*time.Second) {
		return ctx.Err()
	}
	if err := h.fedKill(ctx, nemHist, h.c, h.w, fedPeer, "kill-peer-leader", nil, func() error {
		return start(wctx, fedAuto2, items, 25, span*2/3, true)
	}); err != nil {
		return err
	}

	// 2. The parent's leader killed as soon as a handle exists for a new
	// run, before or while its first submit is forwarded.
	if err := h.fedKill(ctx, nemHist, fs.parent, fs.parentW, fedParent, "kill-parent-leader", func() error {
		if err := start(wctx, fedPinned, items, 25, span/2, true); err != nil {
			return err
		}
		if err := h.waitHandle(ctx, waiter, fedPinned, 20*time.Second); !errors.Is(err, errNotHandedOff) {
			return err
		}
		return nil // fed-routing fails it
	}, nil); err != nil {
		return err
	}

	// 3. A large run handed off by model by the new parent leader, then
	// the clusters cut apart; its cancel is acknowledged by the parent
	// during the partition and must land on the peer after the heal.
	cancelCtx, stopCancelled := context.WithCancel(wctx)
	defer stopCancelled()
	if err := start(cancelCtx, fedCancel, 40*min(items, 50), 500, 0, false); err != nil {
		return err
	}
	handedOff := true
	if err := h.waitHandle(ctx, waiter, fedCancel, 30*time.Second); errors.Is(err, errNotHandedOff) {
		handedOff = false // fed-routing fails it; the cut goes on, with no cancel
	} else if err != nil {
		return err
	}
	canceller, err := h.parentClient("cancel", "cli")
	if err != nil {
		return err
	}
	const cut = 8 * time.Second
	acked := false
	if err := h.fedPartition(ctx, nemHist, cut, func() {
		if !handedOff {
			return
		}
		// Inside the cut only: the acknowledgment must not wait for the peer.
		cctx, cancel := context.WithTimeout(ctx, cut-time.Second)
		defer cancel()
		acked = h.fedCancelRun(cctx, canceller)
	}); err != nil {
		return err
	}
	switch {
	case !handedOff:
	case acked:
		h.note("federation: CancelRun(%s) acknowledged by %s while cut off from %s", fedCancel, fedParent, fedPeer)
	default:
		// It must still land: try again after the heal.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		acked = h.fedCancelRun(cctx, canceller)
		cancel()
		h.note("federation: CancelRun(%s) was not acknowledged while %s was cut off from %s; after the heal: acknowledged %v", fedCancel, fedParent, fedPeer, acked)
	}
	stopCancelled()

	// 4. A second partition while the submits go on.
	if !workload.Sleep(ctx, cfg.Duration/5) {
		return ctx.Err()
	}
	if err := h.fedPartition(ctx, nemHist, 5*time.Second, nil); err != nil {
		return err
	}
	h.revive()
	h.lastHeal = history.Now()

	// Every submit acknowledged, the peer finished, the parent converged.
	cctx, cancel := context.WithTimeout(ctx, cfg.CompletionBound)
	defer cancel()
	for {
		subsMu.Lock()
		left := len(pending)
		subsMu.Unlock()
		if left == 0 {
			break
		}
		if !workload.Sleep(cctx, 200*time.Millisecond) {
			subsMu.Lock()
			h.note("federation: submits not acknowledged within %v of the last heal: %v %v", cfg.CompletionBound, pending, subErrs)
			subsMu.Unlock()
			break
		}
	}
	// (waiter: obs is still polling.)
	h.fedComplete(cctx, waiter)
	stopWorkload()
	wg.Wait()
	h.fedFinal(ctx, obs)
	return nil
}

// fedWaitPeer waits until the parent's leader lists the peer reachable
// and serving the runs' model: a run is routed by model from the peer's
// last PeerInfo, so a run created before it would stay local.
func (h *harness) fedWaitPeer(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		for _, v := range h.fed.parentW.views(wctx) {
			for _, p := range v.resp.GetPeers() {
				if p.GetName() == fedPeer && p.GetReachable() && (p.GetAllModels() || slices.Contains(p.GetModels(), workload.ItemModel)) {
					h.fed.clusterID = v.resp.GetClusterId()
					h.note("federation: %s's leader %s sees %s reachable (leader %s, term %d) serving %s", fedParent, v.id, fedPeer, p.GetLeaderId(), p.GetTerm(), workload.ItemModel)
					return nil
				}
			}
		}
		if !workload.Sleep(wctx, 200*time.Millisecond) {
			return fmt.Errorf("%w: %s never listed %s reachable and serving %s within 60s", ErrInconclusive, fedParent, fedPeer, workload.ItemModel)
		}
	}
}

// tlsConfigOf returns a reloading client TLS config of identity from c's
// CA (nil without TLS).
func (h *harness) tlsConfigOf(c *localcluster.Cluster, identity string) (*tls.Config, error) {
	if !c.TLSEnabled() {
		return nil, nil
	}
	conf, src, err := mtls.FilesFor(c.TLSDir(), identity).LoadReloading(mtls.SourceOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.mu.Lock()
	h.sources = append(h.sources, src)
	h.mu.Unlock()
	return conf, nil
}

// fedCancelRun calls CancelRun(fedCancel) on the parent until it answers
// OK (recorded as an acknowledged cancel) or ctx ends.
func (h *harness) fedCancelRun(ctx context.Context, cl *workload.Client) bool {
	for {
		if _, err := cl.Cancel(ctx, fedCancel); err == nil {
			h.fed.mu.Lock()
			h.fed.cancels = append(h.fed.cancels, fedCancel)
			h.fed.mu.Unlock()
			return true
		}
		if !workload.Sleep(ctx, 250*time.Millisecond) {
			return false
		}
	}
}

// fedKill runs before (a handle to exist), kills -9 the leader of
// cluster c (named name in the report), runs during (a handoff to meet the
// election), and restarts the replica once a new leader serves. Either
// function may be nil.
func (h *harness) fedKill(ctx context.Context, hist *history.Writer, c *localcluster.Cluster, w *watcher, name, op string, before, during func() error) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id, term, err := w.leader(lctx)
	if err != nil {
		return fmt.Errorf("%w: %s has no leader: %v", ErrHarness, name, err)
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
		// The leader may have changed meanwhile: kill the one serving now.
		id, term, err = w.leader(lctx)
	}
	if err != nil {
		return fmt.Errorf("%w: %s has no leader: %v", ErrHarness, name, err)
	}
	r := c.Replica(id)
	node := clusterPlacement{prefix: name}.node(id)
	if err := r.Kill(); err != nil {
		return fmt.Errorf("%w: killing %s: %v", ErrHarness, node, err)
	}
	fedEvent(hist, op, fmt.Sprintf("start: %s's leader %s (term %d) killed", name, node, term), node)
	var derr error
	if during != nil {
		derr = during()
	}
	if _, _, err := w.waitNew(lctx, id, term); err != nil {
		h.note("federation: %s elected no new leader within 30s of killing %s: %v", name, node, err)
	}
	_ = r.Wait(5 * time.Second)
	if err := r.Restart(); err != nil {
		return fmt.Errorf("%w: restarting %s: %v", ErrHarness, node, err)
	}
	fedEvent(hist, op, "heal: "+node+" restarted", node)
	return derr
}

// fedPartition cuts every replica of the parent from every replica of the
// peer for hold, running during inside the cut, and heals.
func (h *harness) fedPartition(ctx context.Context, hist *history.Writer, hold time.Duration, during func()) error {
	as, bs := fedNodes(fedParent), fedNodes(fedPeer)
	if err := h.net.Cut(ctx, network.Both(as, bs)); err != nil {
		return fmt.Errorf("%w: cutting %s from %s: %v", ErrHarness, fedParent, fedPeer, err)
	}
	fedEvent(hist, "partition-clusters", "start: "+strings.Join(as, ",")+" cut from "+strings.Join(bs, ","), append(as, bs...)...)
	end := time.Now().Add(hold)
	// Proof that the cut holds: the parent's leader says the peer is
	// unreachable before the heal.
	seen := make(chan bool, 1)
	sctx, stopSeeing := context.WithDeadline(ctx, end)
	go func() { seen <- h.fedSeesUnreachable(sctx) }()
	if during != nil {
		during()
	}
	workload.Sleep(ctx, time.Until(end))
	stopSeeing()
	if err := h.net.Heal(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("%w: healing: %v", ErrHarness, err)
	}
	fedEvent(hist, "partition-clusters", "heal", append(as, bs...)...)
	if <-seen {
		h.note("federation: %s's leader listed %s unreachable during the %v cut", fedParent, fedPeer, hold)
	} else {
		h.note("federation: %s's leader never listed %s unreachable during the %v cut", fedParent, fedPeer, hold)
	}
	return ctx.Err()
}

// fedSeesUnreachable polls the parent's replicas until its leader lists
// the peer unreachable (true) or ctx ends (false).
func (h *harness) fedSeesUnreachable(ctx context.Context) bool {
	for {
		for _, v := range h.fed.parentW.views(ctx) {
			for _, p := range v.resp.GetPeers() {
				if p.GetName() == fedPeer && !p.GetReachable() {
					return true
				}
			}
		}
		if !workload.Sleep(ctx, 200*time.Millisecond) {
			return false
		}
	}
}

// listRuns lists every run of the cluster cl calls.
func listRuns(ctx context.Context, cl *workload.Client) (map[string]checker.FedRun, error) {
	resp, err := cl.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]checker.FedRun{}
	for _, rc := range resp.GetRuns() {
		out[rc.GetName()] = fedRun(rc)
	}
	return out, nil
}

// errNotHandedOff means the parent created a run it should have handed to
// the peer as a local run (the decision is final: fed-routing judges it).
var errNotHandedOff = errors.New("runner: the run was not handed off")

// waitHandle waits until the parent lists run as a handle to the peer; a
// run listed as local is errNotHandedOff at once.
func (h *harness) waitHandle(ctx context.Context, cl *workload.Client, run string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if runs, err := listRuns(wctx, cl); err == nil {
			if r, ok := runs[run]; ok {
				if r.Cluster != fedPeer {
					h.note("federation: %s created on %s as a local run (cluster %q), not handed to %s", run, fedParent, r.Cluster, fedPeer)
					return errNotHandedOff
				}
				h.note("federation: %s listed as a handle to %s (state %q, remote run %q)", run, fedPeer, r.State, r.RemoteRun)
				return nil
			}
		}
		if !workload.Sleep(wctx, 20*time.Millisecond) {
			return fmt.Errorf("%w: %s never became a handle to %s within %v", ErrInconclusive, run, fedPeer, timeout)
		}
	}
}

// fedObserve polls the parent's RunStatus and records its answers about
// handles (fed-status: never backwards).
func (h *harness) fedObserve(ctx context.Context, cl *workload.Client) {
	for ctx.Err() == nil {
		if runs, err := listRuns(ctx, cl); err == nil {
			now := history.Now()
			h.fed.mu.Lock()
			for _, name := range slices.Sorted(mapsKeys(runs)) {
				if r := runs[name]; r.Cluster == fedPeer {
					h.fed.observations = append(h.fed.observations, checker.FedObservation{Time: now, Run: r})
					if _, ok := h.fed.remote[name]; !ok && r.RemoteRun != "" {
						h.fed.remote[name] = r.RemoteRun
					}
				}
			}
			h.fed.mu.Unlock()
		}
		workload.Sleep(ctx, 500*time.Millisecond)
	}
}

// fedObservePeer polls the peer's runs and records every run under the
// parent's prefix it lists (fed-handles: one remote run per run over the
// whole run, even if a second copy is reaped before the end).
func (h *harness) fedObservePeer(ctx context.Context, cl *workload.Client) {
	for ctx.Err() == nil {
		if runs, err := listRuns(ctx, cl); err == nil {
			h.fed.seePeer(runs)
		}
		workload.Sleep(ctx, 500*time.Millisecond)
	}
}

// seePeer records the peer's runs under the parent's prefix.
func (fs *fedState) seePeer(runs map[string]checker.FedRun) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for name := range runs {
		if strings.HasPrefix(name, fedParent+"/") {
			fs.peerSeen[name] = true
		}
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// fedComplete waits until the peer finished the handed-off runs that must
// finish and the parent's counters of every handle equal the peer's.
func (h *harness) fedComplete(ctx context.Context, parent *workload.Client) {
	peer, err := h.client("complete")
	if err != nil {
		h.note("%v", err)
		return
	}
	last := "nothing read"
	for {
		pr, perr := listRuns(ctx, parent)
		br, berr := listRuns(ctx, peer)
		if perr == nil && berr == nil {
			finished, converged, why := fedConverged(pr, br)
			if finished && h.completed == 0 {
				// The completion bound judges the peer finishing the runs;
				// fed-status judges the parent's counters.
				h.completed = history.Now()
			}
			if converged {
				return
			}
			last = why
		}
		if !workload.Sleep(ctx, 300*time.Millisecond) {
			if ctx.Err() != nil && last == "nothing read" {
				// The bound ran out before a read: say what the clusters say now.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				pr, perr := listRuns(rctx, parent)
				br, berr := listRuns(rctx, peer)
				cancel()
				if perr == nil && berr == nil {
					_, _, last = fedConverged(pr, br)
				}
			}
			h.note("federation: not finished on the peer and converged on the parent within %v of the last heal: %s", h.cfg.CompletionBound, last)
			return
		}
	}
}

// fedConverged reports whether every run that must finish has finished
// on the peer (finished), and also every handle's counters on the parent
// equal its remote run's (converged), and else what is missing.
func fedConverged(parent, peer map[string]checker.FedRun) (finished, converged bool, why string) {
	var notFinished, differ []string
	for _, name := range []string{fedAuto1, fedAuto2, fedPinned, fedCancel} {
		h, ok := parent[name]
		if !ok || h.RemoteRun == "" {
			notFinished = append(notFinished, name+": no handle with a remote run on the parent")
			continue
		}
		r, ok := peer[h.RemoteRun]
		switch {
		case !ok:
			notFinished = append(notFinished, name+": its remote run "+h.RemoteRun+" is not on the peer")
			continue
		case name != fedCancel && (r.Total == 0 || r.Done+r.Dead != r.Total):
			notFinished = append(notFinished, fmt.Sprintf("%s: %d of %d finished on the peer", name, r.Done+r.Dead, r.Total))
		case name == fedCancel && !r.Cancelled && r.Done+r.Dead != r.Total:
			notFinished = append(notFinished, name+": not cancelled on the peer")
		}
		if h.Total != r.Total || h.Done != r.Done || h.Dead != r.Dead || h.Cancelled != r.Cancelled || h.Finished != r.Finished {
			differ = append(differ, fmt.Sprintf("%s: the parent says done %d dead %d cancelled %v finished %v, the peer done %d dead %d cancelled %v finished %v",
				name, h.Done, h.Dead, h.Cancelled, h.Finished, r.Done, r.Dead, r.Cancelled, r.Finished))
		}
	}
	return len(notFinished) == 0, len(notFinished)+len(differ) == 0, strings.Join(append(notFinished, differ...), "; ")
}

// fedFinal reads both clusters' runs for the federation checkers and the
// peer's items of the handed-off runs (renamed to their remote runs) for
// the ordinary ones.
func (h *harness) fedFinal(ctx context.Context, parent *workload.Client) {
	fs := h.fed
	in := checker.FedInput{Parent: fedParent, Peer: fedPeer, Expect: fedExpect()}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	peer, err := h.client("fed-final")
	if err != nil {
		in.Err = err.Error()
	}
	var pr, br map[string]checker.FedRun
	for in.Err == "" {
		var perr, berr error
		pr, perr = listRuns(rctx, parent)
		br, berr = listRuns(rctx, peer)
		if perr == nil && berr == nil {
			break
		}
		if !workload.Sleep(rctx, 500*time.Millisecond) {
			in.Err = fmt.Sprintf("listing the runs: %s: %v; %s: %v", fedParent, perr, fedPeer, berr)
		}
	}
	for _, name := range slices.Sorted(mapsKeys(pr)) {
		in.ParentRuns = append(in.ParentRuns, pr[name])
	}
	for _, name := range slices.Sorted(mapsKeys(br)) {
		in.PeerRuns = append(in.PeerRuns, br[name])
	}
	fs.seePeer(br)
	fs.mu.Lock()
	in.PeerSeen = slices.Sorted(mapsKeys(fs.peerSeen))
	in.Cancels = slices.Clone(fs.cancels)
	in.Observations = slices.Clone(fs.observations)
	fs.mu.Unlock()
	// The items: the runs that must finish, under their remote names.
	h.totals = map[string]uint64{}
	for _, name := range []string{fedAuto1, fedAuto2, fedPinned} {
		r, ok := pr[name]
		if !ok || r.RemoteRun == "" {
			continue
		}
		fs.remote[name] = r.RemoteRun
		h.totals[r.RemoteRun] = uint64(h.cfg.ItemsPerRun)
	}
	if r, ok := pr[fedCancel]; ok && r.RemoteRun != "" {
		fs.remote[fedCancel] = r.RemoteRun
	}
	h.finalRead(ctx)
	h.fedStoreCheck(ctx)
	in.Results = h.fedResults(ctx, parent)
	fs.input = in
}

// fedStoreCheck reads every Done result of the handed-off runs back
// through their store (store-results: the peer's workers stored the bytes
// its ledger recorded).
func (h *harness) fedStoreCheck(ctx context.Context) {
	rd, err := h.client("store-reader")
	if err != nil {
		h.note("%v", err)
		return
	}
	view := &runStores{log: h.log, byRun: map[string]*store.Store{}, byURL: h.fed.stores.byURL, reader: rd}
	for _, name := range []string{fedAuto1, fedAuto2, fedPinned} {
		if remote := h.fed.remote[name]; remote != "" {
			view.runs = append(view.runs, remote)
			view.byRun[remote] = h.fed.stores.byRun[name]
		}
	}
	h.storeIn = view.check(ctx, h.finalRaw)
}

// fedResults reads each handed-off run's items through the parent (its
// Results forwarded to the peer) and compares them with the peer's final
// read, item by item: "" when equal, else the first difference.
func (h *harness) fedResults(ctx context.Context, parent *workload.Client) map[string]string {
	out := map[string]string{}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, name := range []string{fedAuto1, fedAuto2, fedPinned} {
		remote := h.fed.remote[name]
		peer, ok := h.finalRaw[remote]
		if remote == "" || !ok {
			continue // no handle, or the peer's items unread: other verdicts say so
		}
		var got []*rolloutv1.ResultItem
		var err error
		for {
			if got, err = parent.ReadAll(rctx, name); err == nil || !workload.Sleep(rctx, 500*time.Millisecond) {
				break
			}
		}
		out[name] = sameResults(got, peer, err)
	}
	return out
}

// sameResults compares items read through the parent with the peer's.
func sameResults(parent, peer []*rolloutv1.ResultItem, err error) string {
	if err != nil {
		return fmt.Sprintf("reading through %s: %v", fedParent, err)
	}
	if len(parent) != len(peer) {
		return fmt.Sprintf("%d items through %s, %d on %s", len(parent), fedParent, len(peer), fedPeer)
	}
	for i := range parent {
		if !proto.Equal(parent[i], peer[i]) {
			return fmt.Sprintf("item %d (index %d) through %s differs from %s's: %v / %v", i, peer[i].GetIndex(), fedParent, fedPeer,
				prototext.Format(parent[i]), prototext.Format(peer[i]))
		}
	}
	return ""
}

// fedEvents prepares the merged history for the ordinary checkers: the
// parent's submits renamed to their remote runs, the runs that must not
// finish (the cancelled one, the local one) left out.
func (h *harness) fedEvents(events []history.Event) []history.Event {
	if h.fed == nil {
		return events
	}
	omit := []string{fedLocal, fedCancel}
	if r := h.fed.remote[fedCancel]; r != "" {
		omit = append(omit, r)
	}
	return checker.OmitRuns(checker.RenameRuns(events, h.fed.remote), omit)
}
