package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
)

// defaultReplicaTimeout bounds the question to one replica.
const defaultReplicaTimeout = 3 * time.Second

func (a *app) clusterCmd() *cobra.Command {
	var coords []string
	replicaTimeout := defaultReplicaTimeout
	cmd := &cobra.Command{
		Use:   "cluster --coord H:P[,...]",
		Short: "Ask every replica for its view: members, leader, term, commit and applied index",
		Long: "cluster asks every address given, and every member those replicas name, for its own\n" +
			"view of the replica set. While no replica answers it asks again, up to --timeout (as every\n" +
			"command waits for its cluster); it fails only when none answered by then.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().DurationVar(&replicaTimeout, "replica-timeout", replicaTimeout, "how long to wait for one replica")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		addrs, err := parseCoords(coords)
		if err != nil {
			return err
		}
		if replicaTimeout <= 0 {
			return usagef("--replica-timeout must be positive, got %v", replicaTimeout)
		}
		tlsConf, err := a.tlsConfig()
		if err != nil {
			return err
		}
		a.wait.watch(addrs) // the addresses waited for, in --coord's order
		p := newProber(func(addr string) (*coordclient.Client, error) {
			cfg := a.clientConfig([]string{addr}, tlsConf)
			cfg.CallTimeout = replicaTimeout
			return coordclient.New(cfg)
		})
		defer p.Close()
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		views, final := a.probeUntilAnswered(cctx, addrs, p.ask)
		printCluster(a.stdout, views)
		for _, v := range views {
			if v.Err == nil {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if final != nil {
			return fmt.Errorf("no replica answered: %s", tlsCause(final))
		}
		for _, v := range views {
			if c := tlsCause(v.Err); c != "" {
				return fmt.Errorf("no replica answered within %v (--timeout): %s", a.timeout, c)
			}
		}
		if at, last := a.wait.waited(); last != "" {
			return fmt.Errorf("no replica answered within %v (--timeout) at %s; last: %s", a.timeout, at, last)
		}
		return fmt.Errorf("no replica answered within %v (--timeout) at %s", a.timeout, strings.Join(addrs, ","))
	})
	cmd.AddCommand(a.clusterRemoveCmd())
	return cmd
}

// clusterRemoveCmd is "rollout cluster remove ID": it removes a replica
// from the replica set while the cluster keeps serving. Removing the leader
// makes it hand leadership to another voter first; the client then retries
// at the new leader, which completes the removal.
func (a *app) clusterRemoveCmd() *cobra.Command {
	var coords []string
	cmd := &cobra.Command{
		Use:   "remove ID --coord H:P[,...]",
		Short: "Remove a replica from the cluster (the leader hands over leadership first)",
		Long: "remove takes the replica ID out of the Raft configuration through the leader. When ID is\n" +
			"the leader, it transfers leadership to another voter first and the removal completes at the\n" +
			"new leader. Runs and workers keep going throughout. Stop the removed replica's process\n" +
			"afterwards; to add a replica, start rollout-coord with --join.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("cluster remove takes exactly one replica ID, got %d arguments", len(args))
			}
			return nil
		},
	}
	addCoordFlag(cmd, &coords)
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		id := cmd.Flags().Arg(0)
		if id == "" || strings.TrimSpace(id) != id || strings.ContainsAny(id, " \t\r\n") {
			return usagef("replica ID %q is empty or has spaces", id)
		}
		return a.withClient(ctx, coords, func(cctx context.Context, c *coordclient.Client) error {
			resp, err := c.RemoveMember(cctx, &rolloutv1.RemoveMemberRequest{Id: id})
			if err != nil {
				return a.removeError(id, a.timeout, err)
			}
			h := resp.GetHeader()
			fmt.Fprintf(a.stdout, "removed replica %s (leader %s, term %d); stop its process now\n", id, orDash(h.GetReplicaId()), h.GetTerm())
			return nil
		})
	})
	return cmd
}

// withClient connects to the coordinators named by coords with the
// invocation's TLS identity and runs call with a context bounded by
// --timeout; the connection is closed afterwards.
func (a *app) withClient(ctx context.Context, coords []string, call func(ctx context.Context, c *coordclient.Client) error) error {
	addrs, err := parseCoords(coords)
	if err != nil {
		return err
	}
	tlsConf, err := a.tlsConfig()
	if err != nil {
		return err
	}
	c, err := coordclient.New(a.clientConfig(addrs, tlsConf))
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	return call(cctx, c)
}

// removeError explains a failed removal: an id that is not a member and a
// refused change (it would cost the cluster its quorum) get a sentence of
// their own; anything else is the RPC error.
func (a *app) removeError(id string, timeout time.Duration, err error) error {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		switch st.Code() {
		case codes.NotFound:
			return fmt.Errorf("remove replica %s: not a member of the cluster; nothing was changed (%s)", id, st.Message())
		case codes.FailedPrecondition:
			return fmt.Errorf("remove replica %s: refused; nothing was changed: %s", id, st.Message())
		}
	}
	return a.rpcError("remove replica "+id, timeout, err)
}

// probeUntilAnswered probes the cluster (probeCluster) again and again, as
// every command waits for its cluster (clusterWait), until some replica
// answers or ctx ends, and returns the last round's views. A failure that
// waiting cannot fix (a TLS mismatch) ends it at once and is returned as
// final.
func (a *app) probeUntilAnswered(ctx context.Context, seeds []string, ask clusterAsker) (views []replicaView, final error) {
	backoff := 100 * time.Millisecond
	for {
		views = probeCluster(ctx, seeds, ask)
		if ctx.Err() != nil {
			return views, nil
		}
		for _, v := range views {
			if v.Err == nil {
				return views, nil
			}
		}
		// No replica answered: each failure counts as one attempt of a call
		// that has now failed at every address.
		for _, v := range views {
			if err := a.wait.retry(coordclient.RetryEvent{Method: "Cluster", Addr: v.Addr, Err: v.Err, Failures: len(views)}, len(views)); err != nil {
				return views, err
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return views, nil
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// clusterAsker asks the replica at addr for its view.
type clusterAsker func(ctx context.Context, addr string) (*rolloutv1.ClusterResponse, error)

// replicaView is one replica's answer (or why there is none).
type replicaView struct {
	Addr string
	Resp *rolloutv1.ClusterResponse
	Err  error
}

// probeCluster asks every seed address in parallel, then every member's gRPC
// address learned from the answers, until no address is left unasked. The
// views come back in discovery order.
func probeCluster(ctx context.Context, seeds []string, ask clusterAsker) []replicaView {
	asked := make(map[string]bool)
	var views []replicaView
	queue := seeds
	for len(queue) > 0 {
		var round []string
		for _, a := range queue {
			if !asked[a] {
				asked[a] = true
				round = append(round, a)
			}
		}
		out := make([]replicaView, len(round))
		var wg sync.WaitGroup
		for i, addr := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := ask(ctx, addr)
				out[i] = replicaView{Addr: addr, Resp: resp, Err: err}
			}()
		}
		wg.Wait()
		queue = nil
		for _, v := range out {
			views = append(views, v)
			for _, m := range v.Resp.GetMembers() {
				if g := m.GetGrpcAddr(); g != "" && !asked[g] && checkHostPort(g) == nil {
					queue = append(queue, g)
				}
			}
		}
	}
	return views
}

// authoritative picks the view to show members from: the self-declared
// leader with the highest term (coordclient.Leader), else the answer with
// the highest term.
func authoritative(views []replicaView) *replicaView {
	resps := make([]*rolloutv1.ClusterResponse, len(views))
	for i, v := range views {
		if v.Err == nil {
			resps[i] = v.Resp
		}
	}
	if i := coordclient.Leader(resps); i >= 0 {
		return &views[i]
	}
	var best *replicaView
	for i, r := range resps {
		if r != nil && (best == nil || r.GetHeader().GetTerm() > best.Resp.GetHeader().GetTerm()) {
			best = &views[i]
		}
	}
	return best
}

// printExpiring warns of the certificates within a tenth of their life of
// expiring: each replica's own, and those of the workers and clients
// connected to it (once per serial).
func printExpiring(w io.Writer, views []replicaView, now time.Time) {
	seen := map[string]bool{}
	var lines []string
	add := func(where string, c *rolloutv1.CertificateInfo) {
		if c == nil || !c.GetExpiring() || seen[c.GetSerial()] {
			return
		}
		seen[c.GetSerial()] = true
		at := time.Unix(0, c.GetNotAfterUnixNano()).UTC()
		left := at.Sub(now).Round(time.Second)
		when := "expires in " + left.String()
		if left <= 0 {
			when = "EXPIRED " + (-left).String() + " ago"
		}
		lines = append(lines, fmt.Sprintf("  %s (%s, serial %s, %s): %s at %s", orDash(c.GetName()), orDash(c.GetRole()), c.GetSerial(),
			where, when, at.Format(time.RFC3339)))
	}
	for _, v := range views {
		if v.Err != nil {
			continue
		}
		id := orDash(v.Resp.GetHeader().GetReplicaId())
		add("replica "+id+"'s own", v.Resp.GetCertificate())
		for _, p := range v.Resp.GetExpiringPeers() {
			add("connected to "+id, p)
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nWARNING: certificates within a tenth of their life of expiring; renew them (docs/SECURITY.md):\n%s\n", strings.Join(lines, "\n"))
	}
}

// printCluster writes one row per replica, the member list of the
// authoritative view, and the leader.
func printCluster(w io.Writer, views []replicaView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tADDRESS\tSTATE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tLAST LOG\tEPOCH\tSECURITY")
	var down, insecure []string
	for _, v := range views {
		if v.Err != nil {
			fmt.Fprintf(tw, "-\t%s\tunreachable\t-\t-\t-\t-\t-\t-\t-\n", v.Addr)
			down = append(down, fmt.Sprintf("%s: %s", v.Addr, shortErr(v.Err)))
			continue
		}
		r, h := v.Resp, v.Resp.GetHeader()
		security := "mTLS"
		if r.GetInsecure() {
			security = "INSECURE"
			insecure = append(insecure, orDash(h.GetReplicaId()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", orDash(h.GetReplicaId()), v.Addr, orDash(r.GetState().Label()),
			h.GetTerm(), orDash(h.GetLeaderId()), r.GetCommitIndex(), r.GetAppliedIndex(), r.GetLastLogIndex(), r.GetLedgerEpoch(), security)
	}
	_ = tw.Flush()
	for _, d := range down {
		fmt.Fprintln(w, "  "+d)
	}
	printExpiring(w, views, time.Now())
	if len(insecure) > 0 {
		fmt.Fprintf(w, "\nWARNING: %s run with --insecure: no TLS, no authentication; anyone who reaches them can change the ledger and the membership\n",
			strings.Join(insecure, ", "))
	}

	best := authoritative(views)
	if best == nil {
		fmt.Fprintln(w, "\nno replica answered")
		return
	}
	fmt.Fprintf(w, "\nmembers (as seen by %s):\n", orDash(best.Resp.GetHeader().GetReplicaId()))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tGRPC ADDR\tSUFFRAGE\tLEADER")
	for _, m := range best.Resp.GetMembers() {
		leader := ""
		if m.GetLeader() {
			leader = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetId(), orDash(m.GetRaftAddr()), orDash(m.GetGrpcAddr()), orDash(m.GetSuffrage().Label()), leader)
	}
	_ = tw.Flush()
	h := best.Resp.GetHeader()
	if h.GetLeaderId() == "" && h.GetLeaderAddr() == "" {
		fmt.Fprintf(w, "\nleader: unknown (term %d)\n", h.GetTerm())
		printClusterID(w, best.Resp.GetClusterId())
		return
	}
	fmt.Fprintf(w, "\nleader: %s at %s, term %d\n", orDash(h.GetLeaderId()), orDash(h.GetLeaderAddr()), h.GetTerm())
	printClusterID(w, best.Resp.GetClusterId())
	printPeers(w, best.Resp, time.Now())
}

// printPeers writes the cluster's name and its federation peers as the
// replica of resp (the leader, which polls them) sees them: reachable, the
// peer's leader and term, the models it serves, the stores it reaches,
// its clock's skew, the handles routed to it, the last poll and error,
// and when the peer certificate presented to it expires. A cluster
// without --cluster-name or --peers prints nothing.
func printPeers(w io.Writer, resp *rolloutv1.ClusterResponse, now time.Time) {
	if n := resp.GetClusterName(); n != "" {
		fmt.Fprintf(w, "cluster name: %s\n", n)
	}
	peers := resp.GetPeers()
	if len(peers) == 0 {
		return
	}
	fmt.Fprintf(w, "\npeers (as seen by %s):\n", orDash(resp.GetHeader().GetReplicaId()))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tREACHABLE\tLEADER\tTERM\tMODELS\tSTORES\tCLOCK SKEW\tRUNS\tLAST POLL\tCERT EXPIRES\tLAST ERROR")
	var expiring []string
	for _, p := range peers {
		reachable := "no"
		if p.GetReachable() {
			reachable = "yes"
		}
		models := "-"
		switch {
		case p.GetAllModels():
			models = "any"
		case len(p.GetModels()) > 0:
			models = strings.Join(p.GetModels(), ",")
		}
		stores := "-"
		if len(p.GetStores()) > 0 {
			stores = strings.Join(p.GetStores(), ",")
		}
		term, skew, poll := "-", "-", "never"
		if p.GetTerm() > 0 {
			term = fmt.Sprint(p.GetTerm())
		}
		if p.GetLastPollUnixMs() > 0 {
			skew = fmt.Sprintf("%+dms", p.GetClockSkewMs())
			poll = batch.FormatDuration(max(now.Sub(time.UnixMilli(p.GetLastPollUnixMs())), 0)) + " ago"
		}
		cert := "-"
		if c := p.GetCertificate(); c != nil && c.GetNotAfterUnixNano() != 0 {
			at := time.Unix(0, c.GetNotAfterUnixNano()).UTC()
			left := at.Sub(now).Round(time.Second)
			cert = at.Format(time.RFC3339)
			if left <= 0 {
				cert += " (EXPIRED)"
			}
			if c.GetExpiring() || left <= 0 {
				expiring = append(expiring, fmt.Sprintf("  peer %s: the certificate %s presented to it expires at %s", p.GetName(), orDash(c.GetName()), cert))
			}
		}
		lastErr := "-"
		if e := p.GetLastError(); e != "" {
			lastErr = e
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d active/%d\t%s\t%s\t%s\n", p.GetName(), reachable, orDash(p.GetLeaderId()), term,
			models, stores, skew, p.GetActive(), p.GetHandles(), poll, cert, lastErr)
	}
	_ = tw.Flush()
	if len(expiring) > 0 {
		fmt.Fprintf(w, "\nWARNING: peer certificates near or past expiry; issue new ones from each peer's CA (docs/FEDERATION.md):\n%s\n",
			strings.Join(expiring, "\n"))
	}
}

// printClusterID prints the cluster's identity (the prefix of its runs'
// objects in a store, clusters/ID/), or says it has none yet.
func printClusterID(w io.Writer, id string) {
	if id == "" {
		id = "none yet (set by the first leader's epoch entry)"
	}
	fmt.Fprintf(w, "cluster id: %s\n", id)
}

// shortErr is the gist of an RPC error: its gRPC code and message, behind
// the cause when it is a TLS mismatch.
func shortErr(err error) string {
	if errors.Is(err, coordclient.ErrStaleTerm) {
		return "answered from an older term or with none (not yet a cluster member?)"
	}
	if c := tlsCause(err); c != "" && status.Code(err) != codes.PermissionDenied {
		return c + " (" + shortStatus(err) + ")"
	}
	return shortStatus(err)
}

// shortStatus is an error's gRPC code and message.
func shortStatus(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if s := se.GRPCStatus(); s.Code() != 0 {
			return s.Code().String() + ": " + s.Message()
		}
	}
	return err.Error()
}

// prober keeps one client per replica address so that each replica's view
// is taken as it is: a client's epoch guard would otherwise reject the view
// of a replica behind the newest term seen, which is exactly what an
// operator wants to see.
type prober struct {
	mk func(addr string) (*coordclient.Client, error)

	mu      sync.Mutex
	clients map[string]*coordclient.Client
}

func newProber(mk func(addr string) (*coordclient.Client, error)) *prober {
	return &prober{mk: mk, clients: make(map[string]*coordclient.Client)}
}

// ask is a clusterAsker.
func (p *prober) ask(ctx context.Context, addr string) (*rolloutv1.ClusterResponse, error) {
	p.mu.Lock()
	c, ok := p.clients[addr]
	if !ok {
		var err error
		if c, err = p.mk(addr); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.clients[addr] = c
	}
	p.mu.Unlock()
	return c.Cluster(ctx, addr)
}

// Close closes every client.
func (p *prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, c := range p.clients {
		errs = append(errs, c.Close())
	}
	p.clients = map[string]*coordclient.Client{}
	return errors.Join(errs...)
}
