package raftnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Peer is one voter of the configuration Recover writes: a server id and the
// raft address the others dial to reach it.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
}

// maxPeersFileBytes bounds a peers file: a configuration, not a data file.
const maxPeersFileBytes = 1 << 20

// ReadPeersFile reads a peers file: a JSON array of {"id", "raft_addr"}
// objects, for example [{"id":"c1","raft_addr":"10.0.0.1:7001"}]. Unknown
// fields, trailing data, an empty list, an invalid id or address and a
// duplicate id or address are refused; every error (wrapping
// ErrInvalidArgument for bad content) names the file and the entry.
func ReadPeersFile(path string) ([]Peer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("raftnode: peers file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPeersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("raftnode: peers file %s: %w", path, err)
	}
	if len(data) > maxPeersFileBytes {
		return nil, fmt.Errorf("%w: peers file %s is larger than %d bytes", ErrInvalidArgument, path, maxPeersFileBytes)
	}
	peers, err := ParsePeers(data)
	if err != nil {
		return nil, fmt.Errorf("peers file %s: %w", path, err)
	}
	return peers, nil
}

// ParsePeers parses and validates the content of a peers file (see
// ReadPeersFile). Errors wrap ErrInvalidArgument and name the entry.
func ParsePeers(data []byte) ([]Peer, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var peers []Peer
	if err := dec.Decode(&peers); err != nil {
		return nil, fmt.Errorf("%w: not a JSON array of {\"id\", \"raft_addr\"} objects: %v", ErrInvalidArgument, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON array", ErrInvalidArgument)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the JSON array", ErrInvalidArgument)
	}
	if err := validatePeers(peers); err != nil {
		return nil, err
	}
	return peers, nil
}

// validatePeers checks a peer list: not empty, every id and address valid,
// no id or address twice. Errors wrap ErrInvalidArgument and name the entry.
func validatePeers(peers []Peer) error {
	if len(peers) == 0 {
		return fmt.Errorf("%w: no peers: the list must name at least this replica", ErrInvalidArgument)
	}
	ids := make(map[string]int, len(peers))
	addrs := make(map[string]int, len(peers))
	for i, p := range peers {
		if err := ValidateServerID(p.ID); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if err := ValidateServerAddr("raft_addr", p.RaftAddr); err != nil {
			return fmt.Errorf("entry %d (id %q): %w", i, p.ID, err)
		}
		if j, ok := ids[p.ID]; ok {
			return fmt.Errorf("%w: entry %d: id %q is also entry %d", ErrInvalidArgument, i, p.ID, j)
		}
		if j, ok := addrs[p.RaftAddr]; ok {
			return fmt.Errorf("%w: entry %d (id %q): raft_addr %s is also entry %d's", ErrInvalidArgument, i, p.ID, p.RaftAddr, j)
		}
		ids[p.ID], addrs[p.RaftAddr] = i, i
	}
	return nil
}

// Recover rewrites the raft configuration of a stopped replica's DataDir to
// exactly peers (all voters), with hashicorp/raft's RecoverCluster: it
// replays the newest snapshot and every log entry into fsm, writes a new
// snapshot that carries the new configuration, and compacts the log. It is
// the way back after a quorum is lost for good; see RecoverCluster's
// warnings. Every entry in this replica's log is applied, committed or not.
//
// Only cfg.ID, cfg.DataDir, cfg.SnapshotRetain, cfg.FatalResult and
// cfg.Logger are used. cfg.ID must be one of peers and, when DataDir
// records a replica id, that id (else ErrReplicaIDMismatch). DataDir must
// hold a replica's state, with the snapshots its log needs (else
// ErrSnapshotStore); it is opened exactly as New opens it, so a replica
// still running on it makes Recover fail once the file lock's timeout
// passes. fsm must be a fresh instance of the FSM the replica runs (it is
// only used to build the snapshot); an entry FatalResult classifies as
// fatal stops the recovery (ErrFatalApply, naming the entry). Nothing is
// changed when a check fails.
func Recover(cfg Config, fsm raft.FSM, peers []Peer) error {
	if fsm == nil {
		return fmt.Errorf("%w: fsm is nil", ErrInvalidArgument)
	}
	if err := ValidateServerID(cfg.ID); err != nil {
		return fmt.Errorf("raftnode: recover: ID: %w", err)
	}
	if cfg.DataDir == "" {
		return fmt.Errorf("%w: recover: DataDir is empty", ErrInvalidConfig)
	}
	if cfg.SnapshotRetain < 1 {
		cfg.SnapshotRetain = DefaultConfig().SnapshotRetain
	}
	servers := make([]raft.Server, 0, len(peers))
	self := false
	for _, p := range peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		self = self || p.ID == cfg.ID
	}
	if err := validatePeers(peers); err != nil {
		return fmt.Errorf("raftnode: recover: peers: %w", err)
	}
	if !self {
		return fmt.Errorf("%w: recover: the peers do not include this replica %q", ErrInvalidArgument, cfg.ID)
	}
	dbPath := filepath.Join(cfg.DataDir, dbFile)
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("raftnode: recover: %s is not a replica's data directory: %w", cfg.DataDir, err)
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return fmt.Errorf("raftnode: recover: %w", err)
	}
	recorded, ok, err := RecordedID(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("raftnode: recover: %w", err)
	}
	if ok && recorded != cfg.ID {
		return fmt.Errorf("%w: recover: %s belongs to replica %q (its %s), not %q",
			ErrReplicaIDMismatch, cfg.DataDir, recorded, replicaIDFile, cfg.ID)
	}
	logger := cfg.logger()

	store, err := raftboltdb.New(raftboltdb.Options{
		Path: dbPath,
		BoltOptions: &bbolt.Options{
			Timeout:        boltOpenTimeout,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return fmt.Errorf("raftnode: recover: %s is locked by another process: stop the replica using %s first: %w", dbPath, cfg.DataDir, err)
		}
		return fmt.Errorf("raftnode: recover: open %s: %w", dbPath, err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, logger.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("raftnode: recover: snapshot store: %w", err)
	}
	if err := checkSnapshotCovers(cfg.DataDir, store, snaps); err != nil {
		return fmt.Errorf("raftnode: recover: %w", err)
	}
	rc := cfg.raftConfig()
	rc.Logger = logger.Named("raft")
	// The transport only encodes peer addresses into the snapshot's
	// metadata; nothing is dialled or bound.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(peerAddr(peers, cfg.ID)))
	defer trans.Close()
	adapter := newFSMAdapter(fsm, cfg)
	if err := raft.RecoverCluster(rc, adapter, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		if ferr := adapter.fatalErr(); ferr != nil {
			// The adapter refused the snapshot, so RecoverCluster stopped
			// before it wrote anything.
			return fmt.Errorf("raftnode: recover %s: nothing was changed: %w", cfg.DataDir, ferr)
		}
		return fmt.Errorf("raftnode: recover %s: %w", cfg.DataDir, err)
	}
	logger.Info("recovered the raft configuration", "data", cfg.DataDir, "voters", len(servers))
	return nil
}

// RecordedID returns the replica id DataDir dir records (see New), and
// false when it records none.
func RecordedID(dir string) (string, bool, error) {
	path := filepath.Join(dir, replicaIDFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("raftnode: read %s: %w", path, err)
	}
	id, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(id) == 0 {
		return "", false, fmt.Errorf("%w: %s is damaged (%q is not an id and a newline)", ErrReplicaIDMismatch, path, b)
	}
	return string(id), true, nil
}

func peerAddr(peers []Peer, id string) string {
	for _, p := range peers {
		if p.ID == id {
			return p.RaftAddr
		}
	}
	return ""
}
