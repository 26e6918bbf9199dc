package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// session is one term of serving leadership: it starts once the epoch entry
// of term has applied locally and ends (done closed) as soon as the monitor
// sees this node is no longer leader of term, or at shutdown. Proposals are
// queued on the session that accepted them and fail when it ends.
type session struct {
	term uint64

	done    chan struct{}
	endOnce sync.Once
	endErr  error // ErrShutdown or ErrNotLeader; written before done closes

	mu          sync.Mutex
	ended       bool        // guarded by mu
	queue       []*proposal // guarded by mu; commands not yet handed to raft
	queuedCmds  int         // guarded by mu; commands in queue (withdrawn ones included)
	queuedBytes int         // guarded by mu; their summed sizes

	wake     chan struct{} // cap 1: queue became non-empty (or grew)
	inflight chan struct{} // semaphore: batches handed to raft, not resolved
	freed    chan struct{} // cap 1: a batch was resolved (an inflight slot freed)
}

func newSession(term uint64, maxInflight int) *session {
	return &session{
		term:     term,
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		inflight: make(chan struct{}, maxInflight),
		freed:    make(chan struct{}, 1),
	}
}

// alive reports whether the session has not ended.
func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// monitor owns leadership transitions. It wakes on raft observations, on
// LeaderCh, on pokes and on a short ticker (a safety net: observations may
// be dropped), and reconciles the session with raft's state.
func (n *Node) monitor() {
	defer n.wg.Done()
	ticker := time.NewTicker(n.pollInterval)
	defer ticker.Stop()
	var (
		retry      establishRetry
		lastLeader string
		lastKnown  string // the last non-empty leader address
	)
	for {
		n.reconcile(&retry)
		if _, addr := n.Leader(); addr != lastLeader {
			lastLeader = addr
			if addr != "" && addr != lastKnown {
				lastKnown = addr
				n.leadersSeen.Add(1)
			}
			n.signalLeaderChange()
		}
		select {
		case <-n.shutdownCh:
			return
		case <-n.raft.LeaderCh():
		case <-n.obsCh:
		case <-n.pokeCh:
		case <-ticker.C:
		}
	}
}

// establishRetry spaces out attempts to commit the epoch entry while this
// node stays leader of a term but fails to establish it (each attempt
// appends an entry): exponential from establishBackoff to
// maxEstablishBackoff, reset for a new term.
type establishRetry struct {
	term     uint64
	failures int
	at       time.Time
}

func (r *establishRetry) failed(term uint64) time.Duration {
	if r.term != term {
		r.term, r.failures = term, 0
	}
	d := establishBackoff << min(r.failures, 6)
	d = min(d, maxEstablishBackoff)
	r.failures++
	r.at = time.Now().Add(d)
	return d
}

// reconcile ends the session if this node is no longer the leader of its
// term, and establishes a new one if it is leader without one.
func (n *Node) reconcile(retry *establishRetry) {
	state, term := n.raft.State(), n.raft.CurrentTerm()
	if s := n.session.Load(); s != nil && (state != raft.Leader || term != s.term) {
		n.logger.Info("stopped serving", "term", s.term, "state", state.String(), "raft_term", term)
		n.endSession(s, ErrNotLeader)
	}
	if state != raft.Leader || n.session.Load() != nil {
		return
	}
	if retry.term == term && time.Now().Before(retry.at) {
		return
	}
	if err := n.establish(term); err != nil {
		if n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term && !n.isShutdown() {
			d := retry.failed(term)
			n.logger.Warn("could not commit the epoch entry; will retry", "term", term, "retry_in", d, "error", err)
		}
	}
}

// establish runs on a new leader: a barrier (every entry of earlier terms is
// applied), then the epoch command as a batch of one, waited until applied.
// Only then does the node serve term.
func (n *Node) establish(term uint64) error {
	start := time.Now()
	if err := n.waitFuture(context.Background(), n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		return n.mapRaftErr("barrier", err)
	}
	cmd, err := n.cfg.EpochCommand(term)
	if err != nil {
		return fmt.Errorf("%w: EpochCommand(%d): %v", ErrFSMContract, term, err)
	}
	data, err := n.cfg.EncodeBatch(time.Now(), term, [][]byte{cmd})
	if err != nil {
		return fmt.Errorf("%w: EncodeBatch of the epoch command: %v", ErrFSMContract, err)
	}
	fut := n.raft.Apply(data, n.cfg.ApplyTimeout)
	if err := n.waitFuture(context.Background(), fut); err != nil {
		return n.mapRaftErr("epoch entry", err)
	}
	entryTerm, results, err := entryResults(fut.Response(), 1)
	if _, ok := fut.Response().(entryResult); !ok {
		return fmt.Errorf("epoch entry: %w", err)
	}
	if entryTerm != term {
		// Leadership was lost and regained between proposing and appending.
		return fmt.Errorf("%w: epoch entry for term %d landed in term %d", ErrNotLeader, term, entryTerm)
	}
	if errors.Is(err, ErrFSMContract) {
		return fmt.Errorf("epoch entry: %w", err)
	}
	if err != nil {
		return fmt.Errorf("%w: FSM refused the epoch entry: %v", ErrFSMContract, err)
	}
	if e, isErr := results.At(0).(error); isErr {
		return fmt.Errorf("%w: FSM refused the epoch command: %v", ErrFSMContract, e)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return fmt.Errorf("%w: lost leadership of term %d while establishing it", ErrNotLeader, term)
	}
	s := newSession(term, n.cfg.MaxInflightBatches)
	n.session.Store(s)
	n.wg.Add(1)
	go n.propose(s)
	n.logger.Info("serving as leader", "term", term, "epoch_index", fut.Index(), "took", time.Since(start))
	n.signalLeaderChange()
	return nil
}

// endSession ends s with err (ErrShutdown or ErrNotLeader): callers waiting
// on it return at once, and the proposer stops.
func (n *Node) endSession(s *session, err error) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.ended = true
		s.queue = nil
		s.endErr = err
		close(s.done)
		s.mu.Unlock()
		n.session.CompareAndSwap(s, nil)
		n.signalLeaderChange()
	})
}

// sessionError is the error a caller of s gets once s has ended.
func (n *Node) sessionError(s *session) error {
	s.mu.Lock()
	err := s.endErr
	s.mu.Unlock()
	if err == ErrShutdown {
		return ErrShutdown
	}
	return n.notLeaderError()
}

func (n *Node) signalLeaderChange() {
	select {
	case n.leaderChanges <- struct{}{}:
	default:
	}
}

// serving returns the current session if this node is the serving leader
// (never once its FSM adapter has latched a fatal result).
func (n *Node) serving() *session {
	s := n.session.Load()
	if s == nil || !s.alive() || n.fsm.fatalErr() != nil || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != s.term {
		return nil
	}
	return s
}

// ServingTerm reports the term this node serves as leader. ok is true iff
// raft considers it leader AND the epoch entry of that term has been applied
// by the local FSM. Every reply built while ok must carry term.
func (n *Node) ServingTerm() (term uint64, ok bool) {
	if s := n.serving(); s != nil {
		return s.term, true
	}
	return 0, false
}

// WithLeadership returns a context derived from ctx that is cancelled as
// soon as this node stops serving the current term (or shuts down), with
// context.Cause giving a *NotLeaderError (or ErrShutdown); and the term it
// is bound to. Use it to bound long-polls. It fails with *NotLeaderError if
// the node is not serving now. Call the CancelFunc when done.
func (n *Node) WithLeadership(ctx context.Context) (context.Context, context.CancelFunc, uint64, error) {
	if n.isShutdown() {
		return nil, nil, 0, ErrShutdown
	}
	s := n.serving()
	if s == nil {
		return nil, nil, 0, n.notLeaderError()
	}
	lctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-s.done:
			cancel(n.sessionError(s))
		case <-lctx.Done():
		}
	}()
	return lctx, func() { cancel(context.Canceled) }, s.term, nil
}

// VerifyLeader is a linearizable read barrier (read index): it notes the
// commit index, confirms with a quorum that this node is still the leader,
// then waits until the local FSM has applied that index. Once it returns
// nil, a read of the local FSM reflects every write acknowledged before the
// call began. It returns the serving term, *NotLeaderError if the node is
// not (or stops being) the serving leader, or ctx's error.
func (n *Node) VerifyLeader(ctx context.Context) (uint64, error) {
	if n.isShutdown() {
		return 0, ErrShutdown
	}
	s := n.serving()
	if s == nil {
		return 0, n.notLeaderError()
	}
	// The epoch entry of this term has applied, so the commit index is one
	// this leader has committed itself: a valid read index.
	readIndex := n.raft.CommitIndex()
	if err := n.waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		return 0, n.mapRaftErr("verify leader", err)
	}
	// Every entry of a serving term after its epoch entry is a command or a
	// configuration change, both of which advance the adapter's index, so
	// this wait ends.
	applied, abandon := n.fsm.waitApplied(readIndex)
	select {
	case <-applied:
	case <-ctx.Done():
		abandon()
		return 0, fmt.Errorf("raftnode: verify leader: %w", ctx.Err())
	case <-s.done:
		abandon()
		return 0, n.sessionError(s)
	}
	if n.serving() != s {
		return 0, n.sessionError(s)
	}
	return s.term, nil
}
