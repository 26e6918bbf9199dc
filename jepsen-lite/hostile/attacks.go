package hostile

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/workload"
	"github.com/rollout/rollout/store"
)

// IDPrefix starts every item id the hostile nemesis submits: the 3-byte id
// is "HOS", the 32-byte ids start with "HOSTILE!". An item never submitted
// by the workload whose id starts with it was put there by an attack.
const IDPrefix = "HOS"

// maxSend caps the bytes one attack sends (a limit announced above it is
// not tested).
const maxSend = 16 << 20

// plaintext names the absent identity of a plaintext connection.
const plaintext = "plaintext"

// victim is an item a worker owns (or completed), to forge reports for.
type victim struct {
	run            string
	id             []byte
	index, attempt uint64
	// count is a range record's width (0 for an item).
	count        uint64
	owner, state string
	// store: the run keeps its data in an object store (its reports
	// carry result references).
	store bool
}

func (v victim) String() string {
	return fmt.Sprintf("%s/%d (%s by %s, attempt %d)", v.run, v.index, v.state, v.owner, v.attempt)
}

// victim finds an item some worker holds Running by reading the workload's
// runs with the client identity, looking again for a while (items run
// briefly, between chunks none may be Running); failing that, one a worker
// completed.
func (n *Nemesis) victim(ctx context.Context) (victim, error) {
	start := time.Now()
	deadline := start.Add(n.cfg.Window)
	for {
		var done []victim
		if r, _, err := n.leader(ctx); err == nil {
			c, err := n.conn(n.cfg.Client, r.GRPCAddr)
			if err != nil {
				return victim{}, err
			}
			runs := slices.Clone(n.cfg.Runs)
			n.rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
			for _, run := range runs {
				var running []victim
				from := uint64(0)
				for range 20 {
					cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					resp, err := c.Results(cctx, &rolloutv1.ResultsRequest{Run: run, FromIndex: from, Limit: 500})
					cancel()
					if err != nil {
						break
					}
					for _, it := range resp.GetItems() {
						owner := it.GetOwner()
						if owner == "" || owner == n.cfg.Ghost || len(n.others(owner)) == 0 {
							continue
						}
						v := victim{run: run, id: it.GetId(), index: it.GetIndex(), attempt: it.GetAttempt(), count: it.GetCount(), owner: owner,
							state: strings.TrimPrefix(it.GetState().String(), "ITEM_STATE_"), store: it.GetPayloadRef() != nil}
						switch it.GetState() {
						case rolloutv1.ItemState_ITEM_STATE_RUNNING:
							running = append(running, v)
						case rolloutv1.ItemState_ITEM_STATE_DONE:
							done = append(done, v)
						}
					}
					if resp.GetDone() || len(resp.GetItems()) == 0 {
						break
					}
					from = resp.GetNextIndex()
				}
				if len(running) > 0 {
					return running[n.rng.IntN(len(running))], nil
				}
			}
		}
		if len(done) > 0 && time.Since(start) > 3*time.Second {
			return done[n.rng.IntN(len(done))], nil
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 150*time.Millisecond) {
			if len(done) > 0 {
				return done[n.rng.IntN(len(done))], nil
			}
			return victim{}, ErrNoVictim
		}
	}
}

// forge runs the attacks on another worker's items and registration:
// forged reports (as the owner, as the forger itself, with the client
// certificate, over plaintext) and a foreign deregistration.
func (n *Nemesis) forge(ctx context.Context, a Attack) result {
	if a == ForeignDeregister {
		owner := n.pick(n.cfg.Workers)
		forger := n.pick(n.others(owner))
		var repended uint64
		r := n.retry(ctx, transient, func(cctx context.Context, rep Replica) (string, error) {
			c, err := n.conn(forger, rep.GRPCAddr)
			if err != nil {
				return "", err
			}
			resp, err := c.Deregister(cctx, &rolloutv1.DeregisterRequest{WorkerId: owner})
			if err != nil {
				return "", err
			}
			repended = resp.GetRepended()
			return "OK", nil
		})
		r.as = forger
		r.describe("%s's certificate deregisters worker %s", forger, owner)
		if repended > 0 {
			r.changed = fmt.Sprintf("worker %s deregistered: %d of its items re-pended", owner, repended)
		}
		return r
	}
	v, err := n.victim(ctx)
	if err != nil {
		return result{got: Inconclusive, detail: err.Error()}
	}
	forger := n.pick(n.others(v.owner))
	identity, workerID := forger, v.owner
	switch a {
	case ForgeReportCAS:
		workerID = forger
	case ForgeReportClient:
		identity = n.cfg.Client
	case PlaintextGRPC:
		identity = ""
	}
	forged := fmt.Appendf(nil, `{"hostile":"%s #%d, seed %d"}`, a, n.next(), n.cfg.Seed)
	report := &rolloutv1.ItemReport{Run: v.run, Id: v.id, Attempt: v.attempt, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: forged}
	forgedHash := history.ResultHash(forged)
	if v.store {
		// A run with a store takes results by reference only: the forged
		// reference names bytes nobody wrote (the ledger never reads them).
		sum := store.Hash(forged)
		report.Result = nil
		report.ResultRef = &rolloutv1.DataRef{Object: store.ResultPrefix(v.run) + hex.EncodeToString(sum[:]), Length: uint64(len(forged)), Blake3: sum[:]}
		forgedHash = history.RefHash(sum[:])
	}
	cf := transient
	if a == PlaintextGRPC {
		cf = whenUp
	}
	r := n.retry(ctx, cf, func(cctx context.Context, rep Replica) (string, error) {
		c, err := n.conn(identity, rep.GRPCAddr)
		if err != nil {
			return "", err
		}
		resp, err := c.Report(cctx, &rolloutv1.ReportRequest{WorkerId: workerID, Reports: []*rolloutv1.ItemReport{report}})
		if err != nil {
			return "", err
		}
		var got []string
		for _, res := range resp.GetResults() {
			got = append(got, shortStatus(res.GetStatus()))
		}
		if len(got) == 0 {
			return "OK", nil
		}
		return strings.Join(got, "+"), nil
	})
	r.as = cmpOr(identity, plaintext)
	if strings.Contains(r.got, "APPLIED") {
		r.changed = fmt.Sprintf("the forged Done for %s was applied", v)
	}
	r.describe("%s as worker %s: Done for %s", r.as, workerID, v)
	r.items = []history.Item{{Run: v.run, ID: history.IDString(v.id), Index: v.index, Attempt: v.attempt, Outcome: "DONE",
		Owner: v.owner, State: v.state, Result: forgedHash}}
	return r
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Dead loopback addresses a hostile Join names.
const (
	deadRaft = "127.0.0.1:1"
	deadGRPC = "127.0.0.1:2"
)

// membership runs Join and RemoveMember without authority, then checks
// that the configuration is unchanged (undoing, as admin, what an accepted
// call changed, so that the run can go on and be judged).
func (n *Nemesis) membership(ctx context.Context, a Attack) result {
	identity := n.cfg.Client
	if a == JoinWorker || a == RemoveWorker {
		identity = n.pick(n.cfg.Workers)
	}
	var what string
	var call func(context.Context, rolloutv1.CoordinatorClient) error
	switch a {
	case JoinWorker, JoinClient:
		id := fmt.Sprintf("hostile-%d", n.next())
		what = fmt.Sprintf("Join %s at dead addresses %s (raft) and %s (gRPC)", id, deadRaft, deadGRPC)
		call = func(cctx context.Context, c rolloutv1.CoordinatorClient) error {
			_, err := c.Join(cctx, &rolloutv1.JoinRequest{Id: id, RaftAddr: deadRaft, GrpcAddr: deadGRPC})
			return err
		}
	default:
		id := n.pick(n.ids)
		what = "RemoveMember " + id
		call = func(cctx context.Context, c rolloutv1.CoordinatorClient) error {
			_, err := c.RemoveMember(cctx, &rolloutv1.RemoveMemberRequest{Id: id})
			return err
		}
	}
	r := n.retry(ctx, transient, func(cctx context.Context, rep Replica) (string, error) {
		c, err := n.conn(identity, rep.GRPCAddr)
		if err != nil {
			return "", err
		}
		if err := call(cctx, c); err != nil {
			return "", err
		}
		return "OK", nil
	})
	r.as = identity
	r.describe("%s's certificate: %s", identity, what)
	changed, verified := n.checkMembers(ctx)
	r.changed = changed
	if !verified {
		r.detail += "; the configuration could not be read afterwards"
	}
	return r
}

// checkMembers compares the leader's configuration with the replicas. It
// returns what differs (after removing, as admin, members that are no
// replica, and joining back, as admin, replicas that were removed), and
// whether the configuration could be read at all.
func (n *Nemesis) checkMembers(ctx context.Context) (string, bool) {
	deadline := time.Now().Add(n.cfg.Window)
	for {
		if r, view, err := n.leader(ctx); err == nil {
			got := memberIDs(view.GetMembers())
			if slices.Equal(got, n.ids) {
				return "", true
			}
			var extra, missing []string
			for _, id := range got {
				if !slices.Contains(n.ids, id) {
					extra = append(extra, id)
				}
			}
			for _, id := range n.ids {
				if !slices.Contains(got, id) {
					missing = append(missing, id)
				}
			}
			n.repairMembers(ctx, r, extra, missing)
			return fmt.Sprintf("the configuration became [%s]: added [%s], removed [%s]",
				strings.Join(got, " "), strings.Join(extra, " "), strings.Join(missing, " ")), true
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 300*time.Millisecond) {
			return "", false
		}
	}
}

// repairMembers undoes an accepted membership change as admin (best
// effort: the attack is a violation either way).
func (n *Nemesis) repairMembers(ctx context.Context, leader Replica, extra, missing []string) {
	c, err := n.conn(n.cfg.Admin, leader.GRPCAddr)
	if err != nil {
		return
	}
	for _, id := range extra {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.RemoveMember(cctx, &rolloutv1.RemoveMemberRequest{Id: id})
		cancel()
		n.log.Warn("removed a member a hostile Join added", "id", id, "error", err)
	}
	for _, id := range missing {
		for _, rep := range n.cfg.Replicas {
			if rep.ID != id {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.Join(cctx, &rolloutv1.JoinRequest{Id: rep.ID, RaftAddr: rep.RaftAddr, GrpcAddr: rep.GRPCAddr})
			cancel()
			n.log.Warn("joined back a replica a hostile RemoveMember removed", "id", id, "error", err)
		}
	}
}

// raft sends an AppendEntries request to a replica's Raft port over plain
// TCP or over TLS with a worker's certificate. A refusal counts once the
// replica is seen serving right after (a down replica refuses everything).
func (n *Nemesis) raft(ctx context.Context, a Attack) result {
	target := n.cfg.Replicas[n.rng.IntN(len(n.cfg.Replicas))]
	identity := ""
	if a == WorkerRaft {
		identity = n.pick(n.cfg.Workers)
	}
	deadline := time.Now().Add(n.cfg.Window)
	for {
		var conf *tls.Config
		if identity != "" {
			t, err := n.cfg.TLS(identity)
			if err != nil {
				return result{got: Inconclusive, detail: err.Error(), target: target.ID}
			}
			conf = t
		}
		got, why := probeRaft(ctx, target.RaftAddr, conf)
		switch {
		case got == Answered, got == Refused && n.up(ctx, target):
			return result{got: got, detail: fmt.Sprintf("%s to %s's Raft port %s: %s", cmpOr(identity, plaintext), target.ID, target.RaftAddr, why),
				target: target.ID, as: cmpOr(identity, plaintext)}
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 300*time.Millisecond) {
			return result{got: Inconclusive, detail: fmt.Sprintf("%s to %s's Raft port: %s", cmpOr(identity, plaintext), target.ID, why),
				target: target.ID, as: cmpOr(identity, plaintext)}
		}
	}
}

// hostileID returns a fresh 32-byte item id starting with "HOSTILE!".
func (n *Nemesis) hostileID() []byte {
	id := []byte("HOSTILE!")
	for len(id) < 32 {
		id = append(id, byte(n.rng.UintN(256)))
	}
	return id
}

// items returns count items with fresh hostile ids and payloads of
// payload bytes (a JSON object).
func (n *Nemesis) items(count int, payload int) []*rolloutv1.SubmitItem {
	p := jsonPayload(payload)
	base := uint64(1)<<40 + uint64(n.next())<<20
	out := make([]*rolloutv1.SubmitItem, count)
	for i := range out {
		out[i] = &rolloutv1.SubmitItem{Id: n.hostileID(), Index: base + uint64(i), Payload: p}
	}
	return out
}

// jsonPayload returns a JSON object of exactly size bytes (at least 2).
func jsonPayload(size int) []byte {
	if size < 12 {
		return []byte("{}")
	}
	return slices.Concat([]byte(`{"p":"`), bytes.Repeat([]byte("x"), size-8), []byte(`"}`))
}

// submit sends oversized and malformed SubmitItems with the client
// certificate into a workload run. Every one must be InvalidArgument
// (never Unavailable: an Unavailable answer from a replica that serves a
// read right after is the refusal) and create nothing.
func (n *Nemesis) submit(ctx context.Context, a Attack) result {
	run := n.pick(n.cfg.Runs)
	req := &rolloutv1.SubmitItemsRequest{Run: run}
	var what string
	expect := ""
	switch a {
	case ShortID:
		req.Items = []*rolloutv1.SubmitItem{{Id: []byte(IDPrefix), Index: uint64(1)<<40 + uint64(n.next()), Payload: []byte(`{"prompt":"hostile"}`)}}
		what = "one item with the 3-byte id " + IDPrefix
	case NonJSON:
		req.Items = n.items(1, 0)
		req.Items[0].Payload = []byte("hostile: not JSON {")
		what = "one item whose payload is not JSON"
	case EmptySubmit:
		req.Run = fmt.Sprintf("hostile-empty-%d", n.next())
		what = "no items, into the new run " + req.Run
	default:
		lim, err := n.limits(ctx)
		if err != nil {
			return result{got: Inconclusive, detail: err.Error(), as: n.cfg.Client}
		}
		if lim.GetMaxMessageBytes() == 0 || lim.GetMaxRequestBytes() == 0 || lim.GetMaxItemsPerRequest() == 0 || lim.GetMaxPayloadBytes() == 0 {
			return result{got: "no limits announced", as: n.cfg.Client,
				detail: fmt.Sprintf("Cluster announces limits %v: a client cannot know what the coordinator accepts", lim)}
		}
		msg, reqMax, itemsMax, payMax := lim.GetMaxMessageBytes(), lim.GetMaxRequestBytes(), lim.GetMaxItemsPerRequest(), lim.GetMaxPayloadBytes()
		switch a {
		case OversizeItems:
			if itemsMax+1 > 1<<20 {
				return result{got: Inconclusive, detail: fmt.Sprintf("max_items_per_request %d is too many to send", itemsMax), as: n.cfg.Client}
			}
			req.Items = n.items(int(itemsMax)+1, 2)
			what = fmt.Sprintf("%d items (max_items_per_request %d)", itemsMax+1, itemsMax)
		case OversizePayload:
			if payMax+1 > maxSend {
				return result{got: Inconclusive, detail: fmt.Sprintf("max_payload_bytes %d is too large to send", payMax), as: n.cfg.Client}
			}
			req.Items = n.items(1, int(payMax)+1)
			what = fmt.Sprintf("one payload of %d bytes (max_payload_bytes %d)", payMax+1, payMax)
		case OversizeRequest:
			if itemsMax*payMax <= reqMax || reqMax+1 > maxSend {
				return result{got: Inconclusive, detail: fmt.Sprintf("max_request_bytes %d cannot be exceeded within the other limits or is too large to send", reqMax), as: n.cfg.Client}
			}
			p := min(payMax, max(64<<10, reqMax/itemsMax+64))
			count := reqMax/p + 2
			req.Items = n.items(int(count), int(p))
			what = fmt.Sprintf("%d items of %d bytes (max_request_bytes %d)", count, p, reqMax)
			if count*p >= msg {
				expect = Expect(OversizeMessage)
			}
		case OversizeMessage:
			if msg+1024 > maxSend {
				return result{got: Inconclusive, detail: fmt.Sprintf("max_message_bytes %d is too large to send", msg), as: n.cfg.Client}
			}
			req.Items = n.items(1, int(msg)+1024)
			what = fmt.Sprintf("a message of %d bytes (max_message_bytes %d)", msg+1024, msg)
		}
	}
	var created uint32
	r := n.retry(ctx, whenServing, func(cctx context.Context, rep Replica) (string, error) {
		c, err := n.conn(n.cfg.Client, rep.GRPCAddr)
		if err != nil {
			return "", err
		}
		resp, err := c.SubmitItems(cctx, req)
		if err != nil {
			return "", err
		}
		created = resp.GetCreated() + resp.GetCreatedDead()
		return "OK", nil
	})
	r.as = n.cfg.Client
	r.expect = expect
	r.describe("SubmitItems into run %s: %s", req.Run, what)
	if created > 0 {
		r.changed = fmt.Sprintf("%d hostile items created in run %s", created, req.Run)
	}
	return r
}

// limits returns the limits the leader announces.
func (n *Nemesis) limits(ctx context.Context) (*rolloutv1.Limits, error) {
	deadline := time.Now().Add(n.cfg.Window)
	for {
		_, view, err := n.leader(ctx)
		if err == nil {
			return view.GetLimits(), nil
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 300*time.Millisecond) {
			return nil, err
		}
	}
}

// unregistered claims and heartbeats as a worker identity that never
// registered, then checks that it did not become a worker.
func (n *Nemesis) unregistered(ctx context.Context, a Attack) result {
	g := n.cfg.Ghost
	var claimed int
	r := n.retry(ctx, transient, func(cctx context.Context, rep Replica) (string, error) {
		c, err := n.conn(g, rep.GRPCAddr)
		if err != nil {
			return "", err
		}
		if a == UnregisteredClaim {
			resp, err := c.Claim(cctx, &rolloutv1.ClaimRequest{WorkerId: g, MaxItems: 1})
			if err != nil {
				return "", err
			}
			claimed = len(resp.GetItems())
			return "OK", nil
		}
		if _, err := c.Heartbeat(cctx, &rolloutv1.HeartbeatRequest{WorkerId: g}); err != nil {
			return "", err
		}
		return "OK", nil
	})
	r.as = g
	op := "Claim"
	if a == UnregisteredHeartbeat {
		op = "Heartbeat"
	}
	r.describe("%s as %s, never registered", op, g)
	var changes []string
	if claimed > 0 {
		changes = append(changes, fmt.Sprintf("%d items handed to %s", claimed, g))
	}
	if n.isWorker(ctx, g) {
		changes = append(changes, fmt.Sprintf("%s is listed as a worker", g))
	}
	r.changed = strings.Join(changes, "; ")
	return r
}

// isWorker reports whether the ledger lists id as a worker (false when it
// cannot be read).
func (n *Nemesis) isWorker(ctx context.Context, id string) bool {
	deadline := time.Now().Add(n.cfg.Window / 2)
	for {
		if r, _, err := n.leader(ctx); err == nil {
			if c, err := n.conn(n.cfg.Client, r.GRPCAddr); err == nil {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: n.cfg.Runs[0]})
				cancel()
				if err == nil {
					return slices.ContainsFunc(resp.GetWorkers(), func(w *rolloutv1.WorkerStatus) bool { return w.GetId() == id })
				}
			}
		}
		if time.Now().After(deadline) || !workload.Sleep(ctx, 300*time.Millisecond) {
			return false
		}
	}
}
