package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Proposal states: a proposal is taken by the proposer or withdrawn by its
// caller, never both.
const (
	proposalQueued int32 = iota
	proposalTaken
	proposalWithdrawn
)

// proposal is one chunk of a caller's commands waiting in a session's
// queue; the proposer puts it whole into one log entry.
type proposal struct {
	cmds  [][]byte
	size  int // summed len of cmds
	state atomic.Int32
	done  chan proposalResult // cap 1; exactly one send once taken
}

type proposalResult struct {
	applied []Applied // one per cmd, in order, when err is nil
	err     error
}

// Propose commits one command; it is ProposeBatch with a batch of one, and
// its outcomes are ProposeBatch's.
func (n *Node) Propose(ctx context.Context, cmd []byte) (Applied, error) {
	applied, err := n.ProposeBatch(ctx, [][]byte{cmd})
	if err != nil {
		return Applied{}, err
	}
	return applied[0], nil
}

// ProposeBatch commits cmds through the log and returns one Applied per
// command: applied[i] answers cmds[i]. The commands go into one log entry,
// in order, possibly sharing it with other callers' commands queued at the
// same time (group commit); a batch larger than MaxBatchCommands commands
// or MaxBatchBytes bytes is cut, in order, into consecutive entries that
// each hold as many of its commands as fit. It must run on the serving
// leader (else *NotLeaderError).
//
// Outcomes:
//   - nil error: every entry carrying cmds is committed and applied;
//     applied[i] holds command i's own FSM result (which may itself report
//     that the FSM refused that command), its entry's index and term.
//   - an error value the FSM returned for a whole entry (undecodable data),
//     an error wrapping the encoder's error, or ErrFSMContract: that entry
//     had no effect; when the batch spanned several entries, those before
//     it may have been applied (an unknown outcome for the batch), and
//     those after it that were still queued are withdrawn.
//   - *NotLeaderError: returned at once, this node was not serving and
//     nothing was proposed; returned after leadership was lost while the
//     call waited, commands may already have been handed to raft, so their
//     outcome is unknown (they may still commit under the new leader).
//     Commands must therefore be idempotent or compare-and-swap.
//   - ctx's error: the caller stopped waiting. If none of the commands had
//     left the queue they are withdrawn (the message says so); otherwise
//     the outcome is unknown.
//   - ErrShutdown, ErrTimeout, ErrInvalidArgument (no commands, an empty
//     command, or one larger than MaxBatchBytes; nothing was proposed).
//
// On error applied is nil: results are all or nothing. ProposeBatch copies
// cmds; the caller may reuse them once it returns.
func (n *Node) ProposeBatch(ctx context.Context, cmds [][]byte) ([]Applied, error) {
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%w: ProposeBatch: no commands", ErrInvalidArgument)
	}
	for i, c := range cmds {
		if len(c) == 0 {
			return nil, fmt.Errorf("%w: ProposeBatch: command %d is empty", ErrInvalidArgument, i)
		}
		if len(c) > n.cfg.MaxBatchBytes {
			return nil, fmt.Errorf("%w: ProposeBatch: command %d is %d bytes, over MaxBatchBytes (%d)", ErrInvalidArgument, i, len(c), n.cfg.MaxBatchBytes)
		}
	}
	if n.isShutdown() {
		return nil, ErrShutdown
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raftnode: propose: %w (not proposed)", err)
	}
	s := n.serving()
	if s == nil {
		return nil, n.notLeaderError()
	}
	chunks := n.chunk(cmds)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, n.sessionError(s)
	}
	s.queue = append(s.queue, chunks...)
	for _, p := range chunks {
		s.queuedCmds += len(p.cmds)
		s.queuedBytes += p.size
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}

	out := make([]Applied, 0, len(cmds))
	for i, p := range chunks {
		r, err := n.wait(ctx, s, p, chunks[i:], i == 0)
		if err != nil {
			for _, q := range chunks[i+1:] { // what is still queued stays out
				q.state.CompareAndSwap(proposalQueued, proposalWithdrawn)
			}
			return nil, err
		}
		out = append(out, r...)
	}
	return out, nil
}

// chunk copies cmds into proposals that each fit one log entry (at most
// MaxBatchCommands commands and MaxBatchBytes bytes; every command already
// fits on its own).
func (n *Node) chunk(cmds [][]byte) []*proposal {
	var out []*proposal
	var cur *proposal
	for _, c := range cmds {
		if cur == nil || len(cur.cmds) == n.cfg.MaxBatchCommands || cur.size+len(c) > n.cfg.MaxBatchBytes {
			cur = &proposal{done: make(chan proposalResult, 1)}
			out = append(out, cur)
		}
		cur.cmds = append(cur.cmds, bytes.Clone(c))
		cur.size += len(c)
	}
	return out
}

// wait waits for p's result. If ctx ends first it withdraws rest (p and the
// chunks after it) where still queued; first says that no earlier chunk of
// the call was taken, so withdrawing them all means nothing was proposed.
func (n *Node) wait(ctx context.Context, s *session, p *proposal, rest []*proposal, first bool) ([]Applied, error) {
	select {
	case r := <-p.done:
		return r.applied, r.err
	case <-ctx.Done():
		withdrawn := true
		for _, q := range rest {
			if !q.state.CompareAndSwap(proposalQueued, proposalWithdrawn) {
				withdrawn = false
			}
		}
		if withdrawn && first {
			return nil, fmt.Errorf("raftnode: propose: %w (withdrawn before it was proposed)", ctx.Err())
		}
		select {
		case r := <-p.done:
			if r.err != nil || len(rest) == 1 {
				return r.applied, r.err
			}
		default:
		}
		return nil, fmt.Errorf("raftnode: propose: stopped waiting, outcome unknown: %w", ctx.Err())
	case <-s.done:
		select {
		case r := <-p.done:
			return r.applied, r.err
		default:
		}
		return nil, n.sessionError(s)
	}
}

// propose is the session's proposer: it forms batches from the queue (at
// most MaxBatchCommands commands and MaxBatchBytes bytes, at least one
// proposal, never splitting one), encodes each with the session's term, and hands it to raft,
// keeping at most MaxInflightBatches unresolved. When idle, a lone command
// goes out at once. While a batch is in flight, the next one goes out only
// when it is full or when no batch is in flight any more: under load the
// batches grow (fewer, larger log entries, each one bolt transaction and
// fsync on every replica) instead of the log carrying several part-filled
// entries at once; the further slots serve full batches, for links whose
// round trips are long against the time to fill one.
func (n *Node) propose(s *session) {
	defer n.wg.Done()
	cmds := make([][]byte, 0, n.cfg.MaxBatchCommands)
	for {
		if !waitWork(s) {
			return
		}
		select {
		case s.inflight <- struct{}{}:
		case <-s.done:
			return
		}
		if !n.gather(s) {
			return
		}
		batch := n.takeBatch(s)
		if len(batch) == 0 { // all withdrawn, or the session ended
			<-s.inflight
			continue
		}
		cmds = cmds[:0]
		size := 0
		for _, p := range batch {
			cmds = append(cmds, p.cmds...)
			size += p.size
		}
		data, err := n.cfg.EncodeBatch(time.Now(), s.term, cmds)
		clear(cmds)
		if err != nil {
			deliverAll(batch, proposalResult{err: fmt.Errorf("raftnode: encode batch: %w", err)})
			<-s.inflight
			continue
		}
		// Register the batch under s.mu so that Shutdown, which ends the
		// session before waiting on n.batches, never races this Add.
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			deliverAll(batch, proposalResult{err: n.sessionError(s)})
			return
		}
		n.batches.Add(1)
		s.mu.Unlock()
		if o := n.cfg.Observer; o != nil {
			o.ObserveBatch(len(cmds), size)
		}
		start := time.Now()
		fut := n.raft.Apply(data, n.cfg.ApplyTimeout)
		go n.await(s, fut, batch, start)
	}
}

// gather holds the batch back, while another batch is in flight, until it is
// full (MaxBatchCommands commands or MaxBatchBytes bytes queued) or no
// other batch is in flight. The caller holds an inflight slot. It returns
// false when s ends.
func (n *Node) gather(s *session) bool {
	for len(s.inflight) > 1 {
		s.mu.Lock()
		full := s.queuedCmds >= n.cfg.MaxBatchCommands || s.queuedBytes >= n.cfg.MaxBatchBytes
		s.mu.Unlock()
		if full {
			return true
		}
		select {
		case <-s.freed:
		case <-s.wake:
		case <-s.done:
			return false
		}
	}
	return true
}

// waitWork blocks until s's queue holds commands (true) or s ends (false).
func waitWork(s *session) bool {
	for {
		s.mu.Lock()
		ended, empty := s.ended, len(s.queue) == 0
		s.mu.Unlock()
		switch {
		case ended:
			return false
		case !empty:
			return true
		}
		select {
		case <-s.wake:
		case <-s.done:
			return false
		}
	}
}

// takeBatch takes the next batch of whole proposals off the queue (at most
// MaxBatchCommands commands and MaxBatchBytes bytes, at least one
// proposal), skipping withdrawn proposals. It may return none.
func (n *Node) takeBatch(s *session) []*proposal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	take, count, size := 0, 0, 0
	for take < len(s.queue) {
		p := s.queue[take]
		if take > 0 && (count+len(p.cmds) > n.cfg.MaxBatchCommands || size+p.size > n.cfg.MaxBatchBytes) {
			break
		}
		count += len(p.cmds)
		size += p.size
		take++
	}
	batch := make([]*proposal, 0, take)
	for _, p := range s.queue[:take] {
		if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
			batch = append(batch, p)
		}
	}
	for _, p := range s.queue[:take] {
		s.queuedCmds -= len(p.cmds)
		s.queuedBytes -= p.size
	}
	rest := copy(s.queue, s.queue[take:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// await resolves one batch: it waits for raft, frees the in-flight slot and
// hands each proposal its own run of the FSM's per-command results.
func (n *Node) await(s *session, fut raft.ApplyFuture, batch []*proposal, start time.Time) {
	defer n.batches.Done()
	err := fut.Error()
	<-s.inflight
	select {
	case s.freed <- struct{}{}:
	default:
	}
	if o := n.cfg.Observer; o != nil {
		o.ObserveCommit(time.Since(start), err)
	}
	if err != nil {
		deliverAll(batch, proposalResult{err: n.mapRaftErr("propose", err)})
		return
	}
	count := 0
	for _, p := range batch {
		count += len(p.cmds)
	}
	term, results, err := entryResults(fut.Response(), count)
	if err != nil {
		deliverAll(batch, proposalResult{err: err})
		return
	}
	idx, at := fut.Index(), 0
	for _, p := range batch {
		applied := make([]Applied, len(p.cmds))
		for i := range applied {
			applied[i] = Applied{Result: results.At(at), Index: idx, Term: term}
			at++
		}
		p.done <- proposalResult{applied: applied}
	}
}

func deliverAll(batch []*proposal, r proposalResult) {
	for _, p := range batch {
		p.done <- r
	}
}
