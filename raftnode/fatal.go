package raftnode

// Fatal returns a channel that is closed once the node has stopped because
// Config.FatalResult classified an FSM result as fatal: the FSM is never
// called again, its applied index stays before the fatal entry, and raft has
// been shut down (so the node neither leads, votes nor serves reads; every
// call that needs raft fails). FatalErr then returns the error, which wraps
// ErrFatalApply and names the entry and the raft.db file. The owner should
// log it, call Shutdown and exit: the replica's log cannot be applied as
// the cluster applied it, and only an operator can repair it (for example
// by removing the replica and adding it back with an empty DataDir).
//
// The channel never closes on a healthy node, nor on Shutdown.
func (n *Node) Fatal() <-chan struct{} { return n.fsm.stopped }

// FatalErr returns the fatal error once Fatal is closed, and nil before.
func (n *Node) FatalErr() error {
	select {
	case <-n.fsm.stopped:
		return n.fsm.fatalErr()
	default:
		return nil
	}
}

// watchFatal waits for the FSM adapter to latch a fatal result, then stops
// raft at once (no leadership transfer: a successor would have to catch up
// from this replica's damaged log) and closes Fatal.
func (n *Node) watchFatal() {
	defer n.wg.Done()
	select {
	case <-n.shutdownCh:
		return
	case <-n.fsm.latched:
	}
	err := n.fsm.fatalErr()
	n.logger.Error("this replica cannot apply its log; stopping raft", "error", err)
	if serr := n.raft.Shutdown().Error(); serr != nil {
		n.logger.Warn("raft shutdown after a fatal apply", "error", serr)
	}
	n.poke()
	close(n.fsm.stopped)
}
