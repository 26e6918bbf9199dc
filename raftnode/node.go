package raftnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

const (
	// dbFile is the raft-boltdb file (log and stable store) under DataDir.
	dbFile = "raft.db"
	// snapshotDir is where raft.FileSnapshotStore keeps snapshots under
	// DataDir (the store appends this name itself).
	snapshotDir = "snapshots"
	// logCacheSize is how many recent entries the log cache (logcache.go)
	// keeps in memory, and logCacheBytes how many bytes of their data at
	// most: a replica's memory for its recent log is bounded by the bytes,
	// whatever size group commit makes its entries.
	logCacheSize  = 512
	logCacheBytes = 16 << 20
	// boltOpenTimeout bounds the wait for raft.db's file lock (another
	// process holding the same DataDir).
	boltOpenTimeout = 2 * time.Second
	// transportTimeout is the NetworkTransport's I/O deadline.
	transportTimeout = 10 * time.Second
	// transportMaxPool is how many idle connections per peer are pooled.
	transportMaxPool = 3
	// establishBackoff and maxEstablishBackoff bound the wait between
	// attempts when a leader fails to commit its epoch entry.
	establishBackoff    = 100 * time.Millisecond
	maxEstablishBackoff = 5 * time.Second
)

// Applied is the outcome of one proposed command.
type Applied struct {
	// Result is this command's element of the Results (or []any) the FSM
	// returned for the entry, as the FSM typed it.
	Result any
	// Index is the raft log index of the entry that carried the command.
	Index uint64
	// Term is the term of that log entry.
	Term uint64
}

// Stats is a point-in-time view of a node, for status pages and tests.
type Stats struct {
	State             string // "Follower", "Candidate", "Leader" or "Shutdown"
	Term              uint64 // raft's current term
	CommitIndex       uint64
	AppliedIndex      uint64 // last index the FSM has consumed
	LastLogIndex      uint64
	LastSnapshotIndex uint64
	LeaderID          string
	LeaderAddr        string
	// LeaderChanges counts the times this node saw a leader other than the
	// last one it knew (the first leader it sees counts; a spell with no
	// leader known does not).
	LeaderChanges uint64
}

// Member is one server of the raft configuration.
type Member struct {
	ID       string
	Address  string
	Suffrage string // "Voter", "Nonvoter" or "Staging"
}

// Node is one replica: a hashicorp/raft instance with its stores and
// transport, the leadership tracker that commits the epoch entry, and the
// group-committing proposer. All methods are safe for concurrent use.
type Node struct {
	cfg      Config
	logger   hclog.Logger
	raft     *raft.Raft
	fsm      *fsmAdapter
	store    *raftboltdb.BoltStore
	trans    *raft.NetworkTransport
	hasState bool
	addr     string

	observer      *raft.Observer
	obsCh         chan raft.Observation
	contactObs    *raft.Observer
	contact       *contactTracker // contact.go
	leaderChanges chan struct{}   // cap 1, coalesced leader-change signal
	pokeCh        chan struct{}   // cap 1, asks the monitor to reconcile now
	pollInterval  time.Duration
	leadersSeen   atomic.Uint64 // Stats.LeaderChanges

	mu      sync.Mutex // serialises session start/end against shutdown
	closed  bool       // guarded by mu
	session atomic.Pointer[session]

	shutdownCh   chan struct{}
	shutdownOnce sync.Once
	shutdownErr  error
	wg           sync.WaitGroup // monitor and proposer goroutines
	batches      sync.WaitGroup // one per batch handed to raft, until it resolves
}

// New opens (or creates) cfg.DataDir, the bolt log/stable store, the
// snapshot store and the transport, and starts raft with fsm wrapped so the
// node can track applied indexes. fsm must follow the package's FSM
// contract. The data directory remembers its replica id: a DataDir recorded
// for another id is refused with ErrReplicaIDMismatch (one with raft state
// but no record, from before records existed, is adopted unless its raft
// configuration gives this node's address to another id). A snapshot
// directory that is missing beside an existing raft.db, is not a directory,
// or lacks the snapshot the log starts after is refused with
// ErrSnapshotStore. A node with no state on disk does nothing until it is
// bootstrapped (Bootstrap) or added to a cluster by its leader (AddVoter);
// a node with state rejoins its cluster by itself.
func New(cfg Config, fsm raft.FSM) (*Node, error) {
	if fsm == nil {
		return nil, fmt.Errorf("%w: fsm is nil", ErrInvalidArgument)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.logger()
	cfg.Logger = logger

	if err := prepareDataDir(cfg.DataDir); err != nil { // datadir.go
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(cfg.DataDir, dbFile),
		BoltOptions: &bbolt.Options{
			Timeout:        boltOpenTimeout,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("raftnode: open %s in DataDir (is another process using it?): %w", dbFile, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = store.Close()
		}
	}()
	logs, err := newLogCache(store, logCacheSize, logCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("raftnode: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	if err := checkSnapshotCovers(cfg.DataDir, store, snaps); err != nil { // datadir.go
		return nil, err
	}
	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("raftnode: read existing state: %w", err)
	}
	if err := claimDataDir(cfg.DataDir, cfg.ID, cmp.Or(cfg.AdvertiseAddr, cfg.RaftAddr), store, snaps, hasState, logger); err != nil { // datadir.go
		return nil, err
	}
	layer, err := newStreamLayer(cfg.RaftAddr, cfg.AdvertiseAddr, cfg.TLS, cfg.Conns)
	if err != nil {
		return nil, err
	}
	layer.revs = cfg.Revocations
	layer.logRevoked = func(name string, err error) {
		logger.Error("refusing raft traffic of a replica whose certificate is revoked; remove it from the membership (rollout cluster remove "+name+")",
			"replica", name, "error", err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: transportMaxPool,
		Timeout: transportTimeout,
		Logger:  logger.Named("transport"),
	})
	defer func() {
		if !ok {
			_ = trans.Close()
		}
	}()

	n := &Node{
		cfg:           cfg,
		logger:        logger,
		fsm:           newFSMAdapter(fsm, cfg),
		store:         store,
		trans:         trans,
		hasState:      hasState,
		addr:          string(trans.LocalAddr()),
		obsCh:         make(chan raft.Observation, 64),
		leaderChanges: make(chan struct{}, 1),
		pokeCh:        make(chan struct{}, 1),
		pollInterval:  pollInterval(cfg.LeaderLeaseTimeout),
		shutdownCh:    make(chan struct{}),
		contact:       newContactTracker(),
	}
	rc := cfg.raftConfig()
	rc.Logger = logger.Named("raft")
	r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	n.raft = r
	layer.admitFrom(r) // the Raft port admits the replicas of r's configuration
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	contactCh := make(chan raft.Observation, 256)
	n.contactObs = raft.NewObserver(contactCh, false, contactFilter)
	r.RegisterObserver(n.contactObs)
	n.wg.Add(3)
	go n.monitor()
	go n.watchFatal()            // fatal.go
	go n.trackContact(contactCh) // contact.go
	ok = true
	logger.Info("raft node started", "id", cfg.ID, "addr", n.addr, "has_state", hasState, "tls", cfg.TLS != nil)
	return n, nil
}

// pollInterval is how often the monitor re-checks raft's state even without
// an observation: a tenth of the lease, within [5ms, 50ms].
func pollInterval(lease time.Duration) time.Duration {
	d := lease / 10
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	if d > 50*time.Millisecond {
		d = 50 * time.Millisecond
	}
	return d
}

// ID returns this node's server id.
func (n *Node) ID() string { return n.cfg.ID }

// Addr returns the raft address peers use to reach this node (the advertised
// address, with the bound port if RaftAddr asked for port 0).
func (n *Node) Addr() string { return n.addr }

// HasState reports whether raft state (log, stable store or snapshots)
// existed in DataDir when New ran: a restarted replica, which needs neither
// Bootstrap nor a join.
func (n *Node) HasState() bool { return n.hasState }

// Bootstrap makes this node the single voter of a new cluster. It returns nil
// without doing anything if the node has state (it already belongs to a
// cluster). Other nodes join through the leader's AddNonvoter and
// PromoteNonvoter.
func (n *Node) Bootstrap() error {
	if n.isShutdown() {
		return ErrShutdown
	}
	if n.hasState {
		return nil
	}
	f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter,
		ID:       raft.ServerID(n.cfg.ID),
		Address:  raft.ServerAddress(n.addr),
	}}})
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return nil
		}
		return fmt.Errorf("raftnode: bootstrap: %w", err)
	}
	return nil
}

// Leader returns the id and raft address of the leader this node knows of;
// both empty when none is known.
func (n *Node) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// Stats returns a point-in-time view of the node.
func (n *Node) Stats() Stats {
	id, addr := n.Leader()
	var snapIdx uint64
	if v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		snapIdx = v
	}
	return Stats{
		State:             n.raft.State().String(),
		Term:              n.raft.CurrentTerm(),
		CommitIndex:       n.raft.CommitIndex(),
		AppliedIndex:      n.appliedIndex(),
		LastLogIndex:      n.raft.LastIndex(),
		LastSnapshotIndex: snapIdx,
		LeaderID:          id,
		LeaderAddr:        addr,
		LeaderChanges:     n.leadersSeen.Load(),
	}
}

// appliedIndex is the last index the FSM has consumed. Right after a
// snapshot restore (before any entry is applied) the adapter cannot know the
// snapshot's index, so raft's applied index stands in.
func (n *Node) appliedIndex() uint64 {
	a := n.fsm.applied.Load()
	if n.fsm.restored.Load() {
		a = max(a, n.raft.AppliedIndex())
	}
	return a
}

// Members returns the latest raft configuration (possibly not yet
// committed).
func (n *Node) Members() ([]Member, error) {
	if n.isShutdown() {
		return nil, ErrShutdown
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.mapRaftErr("members", err)
	}
	servers := f.Configuration().Servers
	out := make([]Member, 0, len(servers))
	for _, s := range servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String()})
	}
	return out, nil
}

// AddVoter adds (or promotes) server id at raft address addr as a voter. It
// must run on the leader (else *NotLeaderError). Adding a server that is
// already a voter at that address is a no-op; an id already present at
// another address gets its address updated; an address already used by a
// different id is refused with ErrInvalidArgument.
//
// AddVoter makes the server a voter at once, before it has the log: a
// server that never answers then counts toward the quorum. Servers joining
// a running cluster should enter through AddNonvoter and PromoteNonvoter.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	if err := ValidateServerID(id); err != nil {
		return fmt.Errorf("AddVoter: %w", err)
	}
	if err := ValidateServerAddr("address", addr); err != nil {
		return fmt.Errorf("AddVoter: %w", err)
	}
	if err := n.requireLeader(); err != nil {
		return err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return n.mapRaftErr("add voter", err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && string(s.Address) == addr && s.Suffrage == raft.Voter {
			return nil
		}
		if string(s.ID) != id && string(s.Address) == addr {
			return fmt.Errorf("%w: AddVoter: address %s already belongs to server %q", ErrInvalidArgument, addr, s.ID)
		}
	}
	fut := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
	if err := n.waitFuture(ctx, fut); err != nil {
		return n.mapRaftErr("add voter", err)
	}
	n.logger.Info("added voter", "id", id, "addr", addr)
	return nil
}

// RemoveServer removes server id from the configuration. It must run on the
// leader (else *NotLeaderError). An id that is not a member is
// ErrNotMember; removing the last voter is refused with ErrUnsafeChange.
// Removing the leader itself first transfers leadership and then returns a
// *NotLeaderError naming the new leader (if already known), so the caller
// repeats the removal there. Whether the voters left can still reach a
// quorum is the caller's check.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: RemoveServer: empty server id", ErrInvalidArgument)
	}
	if err := n.requireLeader(); err != nil {
		return err
	}
	servers, index, err := n.configuration("remove server")
	if err != nil {
		return err
	}
	found, voters, isVoter := false, 0, false
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if string(s.ID) == id {
			found, isVoter = true, s.Suffrage == raft.Voter
		}
	}
	if !found {
		return fmt.Errorf("%w: RemoveServer: %q", ErrNotMember, id)
	}
	if isVoter && voters == 1 {
		return fmt.Errorf("%w: RemoveServer: %q is the last voter", ErrUnsafeChange, id)
	}
	if id == n.cfg.ID {
		if err := n.TransferLeadership(ctx); err != nil {
			return err
		}
		n.awaitOtherLeader(ctx, 2*n.cfg.ElectionTimeout)
		return n.notLeaderError()
	}
	fut := n.raft.RemoveServer(raft.ServerID(id), index, n.cfg.ApplyTimeout)
	if err := n.waitFuture(ctx, fut); err != nil {
		return n.mapRaftErr("remove server", err)
	}
	n.logger.Info("removed server", "id", id)
	return nil
}

// TransferLeadership hands leadership to the most up-to-date voter and
// waits (bounded by ctx) until this node has stepped down. It must run on
// the leader (else *NotLeaderError); in a single-voter cluster it fails.
func (n *Node) TransferLeadership(ctx context.Context) error {
	if err := n.requireLeader(); err != nil {
		return err
	}
	err := n.waitFuture(ctx, n.raft.LeadershipTransfer())
	n.poke()
	if err != nil {
		return n.mapRaftErr("transfer leadership", err)
	}
	return nil
}

// TransferLeadershipTo hands leadership to voter id and waits (bounded by
// ctx) until this node has stepped down. It must run on the leader (else
// *NotLeaderError); an id that is not a voter of the latest configuration
// other than this node is ErrInvalidArgument. Raft first brings id's log up
// to date, then has it start an election at once.
func (n *Node) TransferLeadershipTo(ctx context.Context, id string) error {
	if err := n.requireLeader(); err != nil {
		return err
	}
	servers, _, err := n.configuration("transfer leadership")
	if err != nil {
		return err
	}
	var target *raft.Server
	for i, s := range servers {
		if string(s.ID) == id && s.Suffrage == raft.Voter && id != n.cfg.ID {
			target = &servers[i]
		}
	}
	if target == nil {
		return fmt.Errorf("%w: transfer leadership to %q: not a voter other than this node", ErrInvalidArgument, id)
	}
	err = n.waitFuture(ctx, n.raft.LeadershipTransferToServer(target.ID, target.Address))
	n.poke()
	if err != nil {
		return n.mapRaftErr("transfer leadership", err)
	}
	return nil
}

// awaitOtherLeader waits, at most limit (and not past ctx or shutdown),
// until this node knows of a leader other than itself, so that a redirect
// can name it.
func (n *Node) awaitOtherLeader(ctx context.Context, limit time.Duration) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	ticker := time.NewTicker(n.pollInterval)
	defer ticker.Stop()
	for {
		if id, _ := n.Leader(); id != "" && id != n.cfg.ID {
			return
		}
		select {
		case <-ticker.C:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-n.shutdownCh:
			return
		}
	}
}

// Snapshot takes a snapshot now, through the FSM's Snapshot/Persist, into
// the FileSnapshotStore, and compacts the log keeping TrailingLogs entries.
// It returns nil when there is nothing new to snapshot.
func (n *Node) Snapshot() error {
	if n.isShutdown() {
		return ErrShutdown
	}
	err := n.waitFuture(context.Background(), n.raft.Snapshot())
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return n.mapRaftErr("snapshot", err)
	}
	return nil
}

// LeaderObservations returns a channel that receives a value whenever the
// known leader changes or this node starts or stops serving. Signals are
// coalesced (capacity one) and the channel is shared: meant for a single
// consumer that re-reads Leader/ServingTerm on each signal.
func (n *Node) LeaderObservations() <-chan struct{} { return n.leaderChanges }

// Shutdown stops the node. If it is the leader and other voters exist, it
// first transfers leadership (bounded by ctx). Queued and in-flight
// proposals fail with ErrShutdown (in-flight ones are an unknown outcome);
// then raft stops, the transport closes and the stores close. It is
// idempotent: later calls return the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

// shutdownTransferAttempts bounds the leadership transfers Shutdown tries.
const shutdownTransferAttempts = 3

func (n *Node) shutdown(ctx context.Context) error {
	// Raft gives a transfer one election timeout; on a loaded machine the
	// target may miss it, and this node simply stays leader: try again
	// while ctx allows, a few times, before stopping as the leader.
	for attempt := 1; n.raft.State() == raft.Leader && n.otherVoters() > 0 && ctx.Err() == nil; attempt++ {
		err := n.TransferLeadership(ctx)
		if err == nil {
			id, addr := n.Leader()
			n.logger.Info("leadership transferred before shutdown", "new_leader", id, "addr", addr, "attempt", attempt)
			break
		}
		if attempt >= shutdownTransferAttempts {
			n.logger.Warn("leadership transfer before shutdown failed", "error", err, "attempts", attempt)
			break
		}
		n.logger.Info("leadership transfer before shutdown: trying again", "error", err, "attempt", attempt)
	}

	n.mu.Lock()
	n.closed = true
	close(n.shutdownCh)
	s := n.session.Load()
	n.mu.Unlock()
	if s != nil {
		n.endSession(s, ErrShutdown)
	}

	// Give batches already handed to raft a bounded chance to resolve, so
	// their goroutines do not outlive the node.
	done := make(chan struct{})
	go func() { n.batches.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(n.cfg.ApplyTimeout):
	}

	var errs []error
	if err := n.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("raftnode: raft shutdown: %w", err))
	}
	n.raft.DeregisterObserver(n.observer)
	n.raft.DeregisterObserver(n.contactObs)
	n.trans.CloseStreams()
	if err := n.trans.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raftnode: close transport: %w", err))
	}
	n.wg.Wait()
	if err := n.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raftnode: close store: %w", err))
	}
	n.logger.Info("raft node stopped", "id", n.cfg.ID)
	return errors.Join(errs...)
}

// otherVoters counts voters other than this node in the latest
// configuration.
func (n *Node) otherVoters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			c++
		}
	}
	return c
}

func (n *Node) isShutdown() bool {
	select {
	case <-n.shutdownCh:
		return true
	default:
		return false
	}
}

// requireLeader returns nil if raft considers this node the leader, else
// ErrShutdown or a *NotLeaderError.
func (n *Node) requireLeader() error {
	if n.isShutdown() {
		return ErrShutdown
	}
	if n.raft.State() != raft.Leader {
		return n.notLeaderError()
	}
	return nil
}

// notLeaderError builds a *NotLeaderError with the leader this node knows
// of, omitting itself (it is not serving, so pointing at itself would only
// send the caller back here).
func (n *Node) notLeaderError() error {
	id, addr := n.Leader()
	if id == n.cfg.ID {
		id, addr = "", ""
	}
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// mapRaftErr translates hashicorp/raft errors into the package's sentinels.
func (n *Node) mapRaftErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, ErrNotLeader):
		n.poke()
		return n.notLeaderError()
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, ErrShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %s: raft did not accept the request within %s", ErrTimeout, op, n.cfg.ApplyTimeout)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("raftnode: %s: stopped waiting, outcome unknown: %w", op, err)
	default:
		return fmt.Errorf("%w: %s: %w", ErrRaft, op, err)
	}
}

// waitFuture waits for f, for ctx, or for the node's shutdown, whichever
// comes first. raft does not resolve every future when it shuts down (a
// committed entry still queued for the FSM is dropped), so the goroutine
// that blocks in f.Error may outlive the call; it holds nothing else.
func (n *Node) waitFuture(ctx context.Context, f raft.Future) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.shutdownCh:
		// Prefer a result that is already there.
		select {
		case err := <-ch:
			return err
		default:
			return ErrShutdown
		}
	}
}

// poke asks the monitor to reconcile leadership now.
func (n *Node) poke() {
	select {
	case n.pokeCh <- struct{}{}:
	default:
	}
}
