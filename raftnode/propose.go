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

// proposal is one caller's command waiting in a session's queue.
type proposal struct {
	cmd   []byte
	state atomic.Int32
	done  chan proposalResult // cap 1; exactly one send once taken
}

type proposalResult struct {
	applied Applied
	err     error
}

// Propose commits cmd through the log, sharing a log entry with whatever
// other commands are queued (group commit), and returns this command's own
// result. It must run on the serving leader (else *NotLeaderError).
//
// Outcomes:
//   - nil error: the entry carrying cmd is committed and applied; Applied
//     holds this command's FSM result, the entry's index and term.
//   - an error value the FSM returned for the whole entry (undecodable data)
//     or an error wrapping the encoder's error: the entry had no effect.
//   - *NotLeaderError: returned at once, this node was not serving and
//     nothing was proposed; returned after leadership was lost while the
//     call waited, the command may already have been handed to raft, so its
//     outcome is unknown (it may still commit under the new leader).
//     Commands must therefore be idempotent or compare-and-swap.
//   - ctx's error: the caller stopped waiting. If the command had not yet
//     left the queue it is withdrawn (the message says so); otherwise its
//     outcome is unknown.
//   - ErrShutdown, ErrTimeout, ErrInvalidArgument (empty command, or one
//     larger than MaxBatchBytes; nothing was proposed).
//
// Propose copies cmd; the caller may reuse it once Propose returns.
func (n *Node) Propose(ctx context.Context, cmd []byte) (Applied, error) {
	if len(cmd) == 0 {
		return Applied{}, fmt.Errorf("%w: Propose: empty command", ErrInvalidArgument)
	}
	if len(cmd) > n.cfg.MaxBatchBytes {
		return Applied{}, fmt.Errorf("%w: Propose: command is %d bytes, over MaxBatchBytes (%d)", ErrInvalidArgument, len(cmd), n.cfg.MaxBatchBytes)
	}
	if n.isShutdown() {
		return Applied{}, ErrShutdown
	}
	if err := ctx.Err(); err != nil {
		return Applied{}, fmt.Errorf("raftnode: propose: %w (not proposed)", err)
	}
	s := n.serving()
	if s == nil {
		return Applied{}, n.notLeaderError()
	}
	p := &proposal{cmd: bytes.Clone(cmd), done: make(chan proposalResult, 1)}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return Applied{}, n.sessionError(s)
	}
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}

	select {
	case r := <-p.done:
		return r.applied, r.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(proposalQueued, proposalWithdrawn) {
			return Applied{}, fmt.Errorf("raftnode: propose: %w (withdrawn before it was proposed)", ctx.Err())
		}
		select {
		case r := <-p.done:
			return r.applied, r.err
		default:
		}
		return Applied{}, fmt.Errorf("raftnode: propose: stopped waiting, outcome unknown: %w", ctx.Err())
	case <-s.done:
		select {
		case r := <-p.done:
			return r.applied, r.err
		default:
		}
		return Applied{}, n.sessionError(s)
	}
}

// propose is the session's proposer: it forms batches from the queue (at
// most MaxBatchCommands commands and MaxBatchBytes bytes, at least one
// command), encodes each with the session's term, and hands it to raft,
// keeping at most MaxInflightBatches unresolved. While the slots are full,
// new commands accumulate and form the next batch; when idle, a lone command
// goes out at once.
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
		batch := n.takeBatch(s)
		if len(batch) == 0 { // all withdrawn, or the session ended
			<-s.inflight
			continue
		}
		cmds = cmds[:0]
		for _, p := range batch {
			cmds = append(cmds, p.cmd)
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
		fut := n.raft.Apply(data, n.cfg.ApplyTimeout)
		go n.await(s, fut, batch)
	}
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

// takeBatch takes the next batch off the queue (at most MaxBatchCommands
// commands and MaxBatchBytes bytes, at least one), skipping withdrawn
// proposals. It may return none.
func (n *Node) takeBatch(s *session) []*proposal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	take, size := 0, 0
	for take < len(s.queue) && take < n.cfg.MaxBatchCommands {
		l := len(s.queue[take].cmd)
		if take > 0 && size+l > n.cfg.MaxBatchBytes {
			break
		}
		size += l
		take++
	}
	batch := make([]*proposal, 0, take)
	for _, p := range s.queue[:take] {
		if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
			batch = append(batch, p)
		}
	}
	rest := copy(s.queue, s.queue[take:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// await resolves one batch: it waits for raft, frees the in-flight slot and
// hands each caller its own element of the FSM's []any.
func (n *Node) await(s *session, fut raft.ApplyFuture, batch []*proposal) {
	defer n.batches.Done()
	err := fut.Error()
	<-s.inflight
	if err != nil {
		deliverAll(batch, proposalResult{err: n.mapRaftErr("propose", err)})
		return
	}
	er, ok := fut.Response().(entryResult)
	if !ok {
		deliverAll(batch, proposalResult{err: fmt.Errorf("%w: entry returned %T", ErrFSMContract, fut.Response())})
		return
	}
	switch r := er.resp.(type) {
	case error:
		deliverAll(batch, proposalResult{err: r})
	case []any:
		if len(r) != len(batch) {
			deliverAll(batch, proposalResult{err: fmt.Errorf("%w: entry of %d commands returned %d results", ErrFSMContract, len(batch), len(r))})
			return
		}
		idx := fut.Index()
		for i, p := range batch {
			p.done <- proposalResult{applied: Applied{Result: r[i], Index: idx, Term: er.term}}
		}
	default:
		deliverAll(batch, proposalResult{err: fmt.Errorf("%w: entry returned %T, want []any or error", ErrFSMContract, er.resp)})
	}
}

func deliverAll(batch []*proposal, r proposalResult) {
	for _, p := range batch {
		p.done <- r
	}
}
