package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
)

// Membership flags (--bootstrap-expect, --min-voters, --dead-server-after):
// see membershipOptions.
//
// With --bootstrap-expect N every replica starts with the same flags, in
// parallel, and --join naming every replica's gRPC address (this
// replica's own may be among them). A replica whose --data holds no Raft
// state asks every listed address (ReplicaInfo) every expectPoll until
// one of these happens:
//
//   - a peer answers that it belongs to a formed cluster (it has Raft
//     state, a configuration or a leader): this replica joins that cluster
//     (the --join path), never forming a second one. This is how a replica
//     whose volume was wiped, or a scaled-up one, comes back;
//   - every listed address answers, none is formed, and together with
//     this replica they are exactly N distinct replicas: each of them
//     bootstraps with the same configuration (the N ids and Raft
//     addresses, sorted by id), then registers its gRPC address through
//     the --join path;
//   - this replica gains a configuration by itself (a peer that
//     bootstrapped replicated it here): it registers and runs.
//
// Names that do not resolve and peers that do not answer yet are normal
// while pods start: the replica keeps asking, and logs who is missing.
// More than N distinct replicas, fewer than N behind every listed address,
// or two answers claiming one id (or one Raft address) are errors that
// stop the replica: no guess could make every replica pick the same set.
// A replica with state ignores --bootstrap-expect and restarts from it.

// expectPoll is how often a replica started with --bootstrap-expect asks
// its peers; expectCallTimeout bounds one question; expectReport is how
// often it logs whom it still waits for, the first time after
// expectFirstReport.
const (
	expectPoll        = 500 * time.Millisecond
	expectCallTimeout = 2 * time.Second
	expectReport      = 10 * time.Second
	expectFirstReport = 2 * time.Second
)

var (
	// errExpectConflict: two answers claim one replica id, or one Raft
	// address, or this replica's own id at another address.
	errExpectConflict = errors.New("--bootstrap-expect: conflicting replicas")
	// errExpectCount: every listed address answered, none is formed, and
	// they are not exactly --bootstrap-expect distinct replicas.
	errExpectCount = errors.New("--bootstrap-expect: wrong number of replicas")
)

// membershipOptions are the flags of bootstrap-expect and the dead-server
// cleanup.
type membershipOptions struct {
	// bootstrapExpect is N of --bootstrap-expect (0: not given);
	// expectSet records that the flag was given (--bootstrap-expect 0 is an
	// error, not "off").
	bootstrapExpect int
	expectSet       bool
	// minVoters is --min-voters (0: --bootstrap-expect, else
	// server.DefaultMinVoters).
	minVoters int
	// deadServerAfter is --dead-server-after (0: no cleanup).
	deadServerAfter time.Duration
}

// validate checks the membership flags against --bootstrap and --join;
// each error names the flags.
func (m membershipOptions) validate(bootstrap bool, join string) error {
	if m.minVoters < 0 {
		return fmt.Errorf("--min-voters must be at least 1 (or 0 for the default), got %d", m.minVoters)
	}
	if m.deadServerAfter < 0 {
		return fmt.Errorf("--dead-server-after must not be negative (0 turns the cleanup off), got %v", m.deadServerAfter)
	}
	if !m.expectSet && m.bootstrapExpect == 0 {
		return nil
	}
	if m.bootstrapExpect < 1 {
		return fmt.Errorf("--bootstrap-expect must be at least 1, got %d", m.bootstrapExpect)
	}
	if bootstrap {
		return errors.New("--bootstrap-expect and --bootstrap are mutually exclusive: with --bootstrap-expect no replica is given --bootstrap")
	}
	addrs := splitAddrs(join)
	if len(addrs) == 0 {
		return errors.New("--bootstrap-expect needs --join naming every replica's gRPC address (host:port,...)")
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--join: %q is not host:port: %w", a, err)
		}
	}
	if m.bootstrapExpect > len(addrs)+1 {
		return fmt.Errorf("--bootstrap-expect %d is more than the replicas --join names (%d addresses, and this replica): list every replica in --join",
			m.bootstrapExpect, len(addrs))
	}
	return nil
}

// effectiveMinVoters is the fewest voters the dead-server cleanup leaves.
func (m membershipOptions) effectiveMinVoters() int {
	switch {
	case m.minVoters > 0:
		return m.minVoters
	case m.bootstrapExpect > 0:
		return m.bootstrapExpect
	default:
		return server.DefaultMinVoters
	}
}

// expectNode is what bootstrapExpect needs of the replica; *raftnode.Node
// has it.
type expectNode interface {
	ID() string
	Addr() string
	Members() ([]raftnode.Member, error)
	BootstrapWith(servers []raftnode.Member) error
}

// peerAnswer is what one listed address said (info) or why it did not.
type peerAnswer struct {
	addr string
	info *rolloutv1.ReplicaInfoResponse
	err  error
}

// bootstrapExpect brings a replica with no state into its cluster under
// --bootstrap-expect (see the comment at the top of this file): it returns
// once this replica is a member (joined, or bootstrapped and registered),
// or with an error that stops the replica; register is the --join path.
func bootstrapExpect(ctx context.Context, o *options, node expectNode, clientTLS *tls.Config, log hclog.Logger, register func(context.Context) error) error {
	addrs := splitAddrs(o.join)
	peers, err := newPeerSet(addrs, clientTLS)
	if err != nil {
		return err
	}
	defer peers.close()
	n := o.membership.bootstrapExpect
	log.Info("waiting for the replicas of --join (--bootstrap-expect)", "expect", n, "join", addrs)
	t := time.NewTicker(expectPoll)
	defer t.Stop()
	lastReport := time.Now().Add(expectFirstReport - expectReport)
	// retry tells a join that may work later (the leader cannot yet reach
	// a quorum of its voters, for one) from one that cannot.
	retry := func(err error) error {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		log.Warn("joining failed; asking the replicas of --join again", "error", err)
		return nil
	}
	for {
		if ms, err := node.Members(); err == nil && len(ms) > 0 {
			log.Info("this replica is in a configuration already (a peer bootstrapped it); registering", "members", len(ms))
			if err := register(ctx); err == nil || retry(err) != nil {
				return err
			}
		}
		answers := peers.ask(ctx)
		d, err := decideExpect(node.ID(), node.Addr(), n, answers)
		if err != nil {
			return err
		}
		switch {
		case d.join != "":
			log.Info("a peer belongs to a formed cluster: joining it (never bootstrapping a second one)", "peer", d.join)
			if err := register(ctx); err == nil || retry(err) != nil {
				return err
			}
		case d.bootstrap != nil:
			ids := make([]string, len(d.bootstrap))
			for i, m := range d.bootstrap {
				ids[i] = m.ID + "=" + m.Address
			}
			log.Info("every expected replica answered with no state: bootstrapping with the same configuration as each of them", "servers", strings.Join(ids, ","))
			if err := node.BootstrapWith(d.bootstrap); err != nil {
				return fmt.Errorf("bootstrap: %w", err)
			}
			// From here on this replica is in a configuration: the loop
			// only registers it.
			if err := register(ctx); err == nil || retry(err) != nil {
				return err
			}
		}
		if time.Since(lastReport) >= expectReport {
			lastReport = time.Now()
			log.Info("still waiting for the replicas of --join", "expect", n, "waiting_for", d.waiting)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for the replicas of --join (--bootstrap-expect %d): %w; last: %s", n, ctx.Err(), d.waiting)
		case <-t.C:
		}
	}
}

// expectDecision is one round's outcome: join through the formed peer at
// join, or bootstrap with these servers, or wait (waiting says for what).
type expectDecision struct {
	join      string
	bootstrap []raftnode.Member
	waiting   string
}

// decideExpect decides one round of bootstrapExpect from the answers of
// every listed address, for replica self at Raft address selfAddr
// expecting n replicas. It is pure: the races are in what the answers say.
// A formed peer always wins (join). Bootstrapping needs every address to
// have answered: any silent address might be a formed replica (or one
// more replica), so nobody bootstraps a set another could see differently.
func decideExpect(self, selfAddr string, n int, answers []peerAnswer) (expectDecision, error) {
	byID := map[string]string{self: selfAddr}   // id -> raft addr
	byAddr := map[string]string{selfAddr: self} // raft addr -> id
	var missing []string
	for _, a := range answers {
		if a.err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", a.addr, a.err))
			continue
		}
		id, raftAddr := a.info.GetHeader().GetReplicaId(), a.info.GetRaftAddr()
		if id == self && raftAddr != selfAddr {
			return expectDecision{}, fmt.Errorf("%w: %s answers as this replica's id %q with Raft address %s, but this replica's is %s: two replicas have one --id",
				errExpectConflict, a.addr, id, raftAddr, selfAddr)
		}
		if prev, ok := byID[id]; ok && prev != raftAddr {
			return expectDecision{}, fmt.Errorf("%w: replica id %q answers with two Raft addresses, %s and %s (at %s): two replicas have one --id",
				errExpectConflict, id, prev, raftAddr, a.addr)
		}
		if prev, ok := byAddr[raftAddr]; ok && prev != id {
			return expectDecision{}, fmt.Errorf("%w: replicas %q and %q both advertise Raft address %s (at %s)",
				errExpectConflict, prev, id, raftAddr, a.addr)
		}
		byID[id], byAddr[raftAddr] = raftAddr, id
		if id != self && a.info.GetFormed() {
			return expectDecision{join: fmt.Sprintf("%s at %s", id, a.addr)}, nil
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return expectDecision{waiting: fmt.Sprintf("%d of %d replicas answered; no answer from %s", len(byID), n, strings.Join(missing, "; "))}, nil
	}
	if len(byID) != n {
		ids := make([]string, 0, len(byID))
		for id := range byID {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return expectDecision{}, fmt.Errorf("%w: every address of --join answered, with no state, as %d distinct replicas (%s), but --bootstrap-expect is %d: make --join name exactly the %d replicas",
			errExpectCount, len(ids), strings.Join(ids, ", "), n, n)
	}
	servers := make([]raftnode.Member, 0, n)
	for id, addr := range byID {
		servers = append(servers, raftnode.Member{ID: id, Address: addr, Suffrage: "Voter"})
	}
	slices.SortFunc(servers, func(a, b raftnode.Member) int { return strings.Compare(a.ID, b.ID) })
	return expectDecision{bootstrap: servers}, nil
}

// peerSet holds a client connection per listed address.
type peerSet struct {
	addrs []string
	conns []*grpc.ClientConn
	tls   *tls.Config
}

// newPeerSet dials (lazily) every address.
func newPeerSet(addrs []string, clientTLS *tls.Config) (*peerSet, error) {
	p := &peerSet{addrs: addrs, conns: make([]*grpc.ClientConn, len(addrs)), tls: clientTLS}
	for i, a := range addrs {
		cc, err := dialExpectPeer(a, clientTLS)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("--join: %s: %w", a, err)
		}
		p.conns[i] = cc
	}
	return p, nil
}

// ask asks every address once (askPeers). The connection of an address
// that did not answer is made afresh for the next round: gRPC backs off
// re-resolving a name that failed for up to two minutes, and a pod's DNS
// name appears only once the pod exists.
func (p *peerSet) ask(ctx context.Context) []peerAnswer {
	answers := askPeers(ctx, p.addrs, p.conns, p.tls)
	for i, a := range answers {
		if a.err == nil {
			continue
		}
		if cc, err := dialExpectPeer(p.addrs[i], p.tls); err == nil {
			p.conns[i].Close()
			p.conns[i] = cc
		}
	}
	return answers
}

// close closes every connection.
func (p *peerSet) close() {
	for _, cc := range p.conns {
		if cc != nil {
			cc.Close()
		}
	}
}

// dialExpectPeer returns a lazily connecting client for a listed address;
// reconnects back off at most a second (a peer coming up is found soon).
func dialExpectPeer(addr string, clientTLS *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if clientTLS != nil {
		creds = credentials.NewTLS(clientTLS.Clone())
	}
	bo := backoff.DefaultConfig
	bo.MaxDelay = time.Second
	return grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: expectCallTimeout}))
}

// askPeers asks every listed address, in parallel, for its ReplicaInfo.
// Over TLS an answer counts only from a replica certificate named as the
// id the answer gives.
func askPeers(ctx context.Context, addrs []string, conns []*grpc.ClientConn, clientTLS *tls.Config) []peerAnswer {
	out := make([]peerAnswer, len(addrs))
	var wg sync.WaitGroup
	for i := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, expectCallTimeout)
			defer cancel()
			var p peer.Peer
			info, err := rolloutv1.NewCoordinatorClient(conns[i]).ReplicaInfo(cctx, &rolloutv1.ReplicaInfoRequest{}, grpc.Peer(&p))
			if err == nil {
				err = checkPeerIdentity(clientTLS, &p, info.GetHeader().GetReplicaId())
			} else if st, ok := status.FromError(err); ok {
				err = fmt.Errorf("%s: %s", st.Code(), st.Message())
			}
			out[i] = peerAnswer{addr: addrs[i], info: info, err: err}
		}()
	}
	wg.Wait()
	return out
}

// checkPeerIdentity checks, over TLS, that the peer presented a verified
// replica certificate named id.
func checkPeerIdentity(clientTLS *tls.Config, p *peer.Peer, id string) error {
	if clientTLS == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return errors.New("it presented no certificate")
	}
	leaf, ok := mtls.VerifiedServerCert(clientTLS, ti.State)
	if !ok {
		return errors.New("it presented no verified certificate")
	}
	ident, err := mtls.IdentityOf(leaf)
	if err != nil {
		return fmt.Errorf("its certificate: %w", err)
	}
	if ident.Role != mtls.RoleReplica || ident.Name != id {
		return fmt.Errorf("it answers as replica %q with the certificate of %s", id, ident)
	}
	return nil
}

// removedCheckFor bounds how long checkMembership looks for a peer that
// knows a leader.
const removedCheckFor = 2 * time.Minute

// checkMembership runs on a replica that restarted from its data under
// --bootstrap-expect: it asks the replicas of --join until one of the others
// answers with a leader and a configuration (for at most removedCheckFor).
// When that configuration does not name this replica it logs an error: a
// replica the cluster removed (the dead-server cleanup, or rollout cluster
// remove) is refused at every member's Raft port; its data is stale, and
// only an empty --data brings it back (it then joins). The replica's data
// is never touched here. When the configuration names it but the peer's
// ledger holds another gRPC address for it (none: it stopped between
// bootstrapping and registering; or its address changed), it registers
// again through register (the --join path; idempotent).
func checkMembership(ctx context.Context, o *options, self, grpcAdv string, clientTLS *tls.Config, log hclog.Logger, register func(context.Context) error) {
	peers, err := newPeerSet(splitAddrs(o.join), clientTLS)
	if err != nil {
		return
	}
	defer peers.close()
	ctx, cancel := context.WithTimeout(ctx, removedCheckFor)
	defer cancel()
	t := time.NewTicker(expectPoll)
	defer t.Stop()
	for {
		for _, a := range peers.ask(ctx) {
			info := a.info
			if a.err != nil || info.GetHeader().GetReplicaId() == self || info.GetLeaderId() == "" || len(info.GetMembers()) == 0 {
				continue
			}
			i := slices.IndexFunc(info.GetMembers(), func(m *rolloutv1.Member) bool { return m.GetId() == self })
			if i >= 0 {
				if got := info.GetMembers()[i].GetGrpcAddr(); got != grpcAdv {
					log.Info("the cluster's ledger does not hold this replica's gRPC address; registering it", "holds", got, "grpc", grpcAdv)
					if err := register(ctx); err != nil {
						log.Warn("could not register this replica's gRPC address", "error", err)
					}
				}
				return
			}
			log.Error("this replica was removed from its cluster (the leader's dead-server cleanup, or rollout cluster remove): "+
				"its data is stale and every member refuses it; empty --data to let it join again",
				"asked", info.GetHeader().GetReplicaId(), "leader", info.GetLeaderId(), "data", o.data)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
