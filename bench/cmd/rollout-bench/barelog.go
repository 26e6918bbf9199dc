package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/rollout/rollout/raftnode"
)

// BareLogRun is the commands/s of hashicorp/raft + raft-boltdb/v2 with a
// no-op FSM: 3 nodes in this process on loopback TCP, raftnode's timeouts,
// Inflight goroutines each applying entries of CmdsPerEntry commands of
// CmdBytes bytes and waiting for each to be applied.
type BareLogRun struct {
	Name         string  `json:"name"`
	CmdBytes     int     `json:"cmd_bytes"`
	CmdsPerEntry int     `json:"cmds_per_entry"`
	Inflight     int     `json:"inflight"`
	Seconds      float64 `json:"seconds"`
	Entries      int64   `json:"entries"`
	CmdsPerS     float64 `json:"cmds_per_s"`
	EntriesPerS  float64 `json:"entries_per_s"`
	// LeaderLostApplies counts applies that failed because leadership
	// moved (the harness follows the new leader and goes on).
	LeaderLostApplies int64 `json:"leader_lost_applies,omitempty"`
}

// bareLogVariants: one command per entry as raftnode sends them with group
// commit off (MaxInflightBatches 4 in flight); the same with 256 callers, so
// that hashicorp/raft batches the appends itself; and group commit as
// raftnode does it (64 commands per entry, 4 entries in flight), and with
// 64 such entries in flight.
var bareLogVariants = []BareLogRun{
	{Name: "1 cmd/entry, 4 in flight", CmdBytes: 100, CmdsPerEntry: 1, Inflight: 4},
	{Name: "1 cmd/entry, 256 in flight", CmdBytes: 100, CmdsPerEntry: 1, Inflight: 256},
	{Name: "64 cmds/entry, 4 in flight", CmdBytes: 100, CmdsPerEntry: 64, Inflight: 4},
	{Name: "64 cmds/entry, 64 in flight", CmdBytes: 100, CmdsPerEntry: 64, Inflight: 64},
}

func (b *bench) bareLog(ctx context.Context) error {
	var errs []error
	for _, v := range bareLogVariants {
		dir, err := b.stageDir(fmt.Sprintf("barelog-%d-%d", v.CmdsPerEntry, v.Inflight))
		if err != nil {
			return err
		}
		r, err := runBareLog(ctx, dir, v, b.cfg.barelogDur)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("%s: %w", v.Name, err))
			continue
		}
		b.logf("bare log %s: %.0f cmds/s (%.0f entries/s)", r.Name, r.CmdsPerS, r.EntriesPerS)
		b.res.BareLog = append(b.res.BareLog, r)
	}
	return errors.Join(errs...)
}

// nopFSM applies nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

func runBareLog(ctx context.Context, dir string, v BareLogRun, dur time.Duration) (BareLogRun, error) {
	def := raftnode.DefaultConfig()
	type node struct {
		r     *raft.Raft
		trans *raft.NetworkTransport
		store *raftboltdb.BoltStore
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			if n.r != nil {
				_ = n.r.Shutdown().Error()
			}
			n.trans.Close()
			n.store.Close()
		}
	}()
	var servers []raft.Server
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 8, 10*time.Second, io.Discard)
		if err != nil {
			return v, err
		}
		store, err := raftboltdb.NewBoltStore(filepath.Join(dir, id+".db"))
		if err != nil {
			trans.Close()
			return v, err
		}
		nodes = append(nodes, &node{trans: trans, store: store})
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: trans.LocalAddr()})
	}
	for i, n := range nodes {
		rc := raft.DefaultConfig()
		rc.LocalID = servers[i].ID
		rc.HeartbeatTimeout, rc.ElectionTimeout = def.HeartbeatTimeout, def.ElectionTimeout
		rc.LeaderLeaseTimeout, rc.CommitTimeout = def.LeaderLeaseTimeout, def.CommitTimeout
		rc.SnapshotInterval, rc.SnapshotThreshold, rc.TrailingLogs = def.SnapshotInterval, def.SnapshotThreshold, def.TrailingLogs
		rc.Logger = hclog.NewNullLogger()
		snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, string(servers[i].ID)), 1, io.Discard)
		if err != nil {
			return v, err
		}
		if i == 0 {
			if err := raft.BootstrapCluster(rc, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
				return v, err
			}
		}
		r, err := raft.NewRaft(rc, nopFSM{}, n.store, n.store, snaps, n.trans)
		if err != nil {
			return v, err
		}
		n.r = r
	}
	// leaderOf waits (up to 30 s) for a node that is leader.
	leaderOf := func() (*raft.Raft, error) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			for _, n := range nodes {
				if n.r.State() == raft.Leader {
					return n.r, nil
				}
			}
			if time.Now().After(deadline) {
				return nil, errors.New("no leader in 30s")
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Every follower must have joined the configuration's log before the
	// clock starts. A starved machine can lose the first leader during the
	// barrier: wait for the next one, as the appliers below do.
	var leader *raft.Raft
	for attempt := 0; ; attempt++ {
		var err error
		if leader, err = leaderOf(); err != nil {
			return v, err
		}
		err = leader.Barrier(10 * time.Second).Error()
		if err == nil {
			break
		}
		if attempt >= 10 || !(errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader)) {
			return v, fmt.Errorf("barrier before the clock starts: %w", err)
		}
	}

	payload := make([]byte, v.CmdBytes*v.CmdsPerEntry)
	for i := range payload {
		payload[i] = byte(i)
	}
	var (
		entries atomic.Int64
		lost    atomic.Int64 // applies that failed because leadership moved
		mu      sync.Mutex
		fatal   error
	)
	current := leader
	stop := time.Now().Add(dur)
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < v.Inflight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				mu.Lock()
				r := current
				mu.Unlock()
				err := r.Apply(payload, 10*time.Second).Error()
				switch {
				case err == nil:
					entries.Add(1)
				case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader):
					// A starved machine loses leaders too: follow the new one.
					if lost.Add(1) > 100*int64(v.Inflight) {
						mu.Lock()
						fatal = cmp.Or(fatal, fmt.Errorf("leadership kept moving: %w", err))
						mu.Unlock()
						return
					}
					nl, lerr := leaderOf()
					mu.Lock()
					if lerr != nil {
						fatal = cmp.Or(fatal, lerr)
					} else {
						current = nl
					}
					mu.Unlock()
					if lerr != nil {
						return
					}
				default:
					mu.Lock()
					fatal = cmp.Or(fatal, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if fatal != nil {
		return v, fatal
	}
	v.LeaderLostApplies = lost.Load()
	v.Seconds = elapsed.Seconds()
	v.Entries = entries.Load()
	v.EntriesPerS = float64(v.Entries) / v.Seconds
	v.CmdsPerS = v.EntriesPerS * float64(v.CmdsPerEntry)
	return v, nil
}
