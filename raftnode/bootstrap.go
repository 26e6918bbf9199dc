package raftnode

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
)

// ErrBootstrapConfig means a configuration given to BootstrapWith is not
// one a cluster can start from: it does not name this node at its
// address, or repeats an id or an address.
var ErrBootstrapConfig = errors.New("raftnode: bad bootstrap configuration")

// BootstrapWith makes this node one of the voters of a new cluster whose
// configuration is servers (ids and Raft addresses; the suffrage is ignored:
// every server is a voter). Every server of the set must be bootstrapped
// with the same set: hashicorp/raft's BootstrapCluster is safe when every
// server is given an identical configuration, and the order does not
// matter (it is sorted by id here). The set must name this node with its
// own address (Addr), and no id or address may appear twice
// (ErrBootstrapConfig, naming them; nothing is written). It returns nil
// without doing anything if the node has state, or gained a configuration
// since it started (a peer's leader already replicated to it).
func (n *Node) BootstrapWith(servers []Member) error {
	if n.isShutdown() {
		return ErrShutdown
	}
	conf, err := bootstrapConfig(n.cfg.ID, n.addr, servers)
	if err != nil {
		return err
	}
	if n.hasState {
		return nil
	}
	f := n.raft.BootstrapCluster(conf)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return nil
		}
		return fmt.Errorf("raftnode: bootstrap: %w", err)
	}
	n.logger.Info("bootstrapped a cluster", "servers", len(conf.Servers))
	return nil
}

// bootstrapConfig checks servers for BootstrapWith and returns the
// configuration, sorted by id.
func bootstrapConfig(self, selfAddr string, servers []Member) (raft.Configuration, error) {
	ids, addrs := map[string]string{}, map[string]string{}
	var conf raft.Configuration
	found := false
	for _, s := range servers {
		if err := ValidateServerID(s.ID); err != nil {
			return conf, fmt.Errorf("%w: %w", ErrBootstrapConfig, err)
		}
		if err := ValidateServerAddr("address of "+s.ID, s.Address); err != nil {
			return conf, fmt.Errorf("%w: %w", ErrBootstrapConfig, err)
		}
		if a, ok := ids[s.ID]; ok {
			return conf, fmt.Errorf("%w: id %q appears twice (at %s and %s)", ErrBootstrapConfig, s.ID, a, s.Address)
		}
		if id, ok := addrs[s.Address]; ok {
			return conf, fmt.Errorf("%w: address %s appears twice (ids %q and %q)", ErrBootstrapConfig, s.Address, id, s.ID)
		}
		ids[s.ID], addrs[s.Address] = s.Address, s.ID
		if s.ID == self {
			if s.Address != selfAddr {
				return conf, fmt.Errorf("%w: it names this node %q at %s, but its address is %s", ErrBootstrapConfig, self, s.Address, selfAddr)
			}
			found = true
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Address)})
	}
	if !found {
		return conf, fmt.Errorf("%w: it does not name this node %q", ErrBootstrapConfig, self)
	}
	slices.SortFunc(conf.Servers, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	return conf, nil
}
