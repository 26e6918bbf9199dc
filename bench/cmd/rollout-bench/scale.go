package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
)

// Scale is a run of --scale-items items submitted with the CLI (not run
// through workers): what a large ledger costs.
type Scale struct {
	Items           int     `json:"items"`
	SubmitS         float64 `json:"submit_s"`
	SubmitItemsPerS float64 `json:"submit_items_per_s"`
	CLICPUUS        float64 `json:"cli_cpu_per_item_us"`
	LeaderPeakRSS   int64   `json:"leader_peak_rss_bytes"`
	FollowerPeakRSS int64   `json:"follower_peak_rss_bytes"`
	LogEntries      uint64  `json:"log_entries"`
	SnapshotIndex   uint64  `json:"snapshot_index"`
	SnapshotBytes   int64   `json:"snapshot_bytes"`
	SnapshotS       float64 `json:"snapshot_s"`
	RestoreS        float64 `json:"restore_s"`
	// RestoreSeen: the restarted follower's log shows its restore from
	// the snapshot (RestoreS can round to 0 for a small one: the log's
	// timestamps are in milliseconds).
	RestoreSeen         bool    `json:"restore_seen"`
	RestartCaughtUpS    float64 `json:"restart_to_caught_up_s"`
	NewReplicaS         float64 `json:"new_replica_caught_up_s"`
	NewReplicaByInstall bool    `json:"new_replica_by_snapshot_install"`
}

// Snapshots: checked every 2-4 s, after 512 new entries; the harness adds
// that many entries once the submit is done so that a snapshot covers the
// whole run.
// Only scaleTrailingLogs entries stay after a snapshot, so that a replica
// with an empty disk gets the snapshot (as it would from a long-lived
// cluster) rather than the whole log.
const (
	scaleSnapshotInterval  = 2 * time.Second
	scaleSnapshotThreshold = 512
	scaleTrailingLogs      = 256
)

func (b *bench) scale(ctx context.Context) error {
	n := b.cfg.scaleItems
	input, err := b.inputFile(n, "scale")
	if err != nil {
		return err
	}
	cl, dir, err := b.startCluster(ctx, "scale",
		"--snapshot-interval", scaleSnapshotInterval.String(),
		"--snapshot-threshold", strconv.Itoa(scaleSnapshotThreshold),
		"--trailing-logs", strconv.Itoa(scaleTrailingLogs))
	if err != nil {
		return err
	}
	defer cl.Stop()
	sc := &Scale{Items: n}
	b.res.Scale = sc

	sub, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", "scale", storeFlag(dir))
	if err != nil {
		return err
	}
	sc.SubmitS = sub.Wall.Seconds()
	sc.SubmitItemsPerS = float64(n) / sc.SubmitS
	sc.CLICPUUS = float64(sub.CPU) / float64(time.Microsecond) / float64(n)
	b.logf("scale: submitted %d items in %.1fs", n, sc.SubmitS)

	c, err := client(cl, "bench-probe", 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// Enough log entries (one Register each, one at a time so that group
	// commit cannot merge them) for a snapshot of the whole state.
	for i := 0; i < scaleSnapshotThreshold+16; i++ {
		if _, err := c.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bench-probe"}); err != nil {
			return fmt.Errorf("register: %w", err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return err
	}
	lv := replicaView(ctx, cl, leader.ID)
	if lv == nil {
		return fmt.Errorf("leader %s does not answer", leader.ID)
	}
	last := lv.GetLastLogIndex()
	sc.LogEntries = last
	var followers []*localcluster.Replica
	for _, r := range cl.Replicas {
		if r != leader {
			followers = append(followers, r)
		}
	}

	// The snapshot that covers (nearly) everything, on the leader and on
	// the follower that will restore it.
	snapWait := 6*scaleSnapshotInterval + 60*time.Second
	snap, err := waitSnapshot(ctx, leader, last-scaleSnapshotThreshold, snapWait)
	if err != nil {
		return err
	}
	sc.SnapshotIndex, sc.SnapshotS = snap.index, snap.took.Seconds()
	if sc.SnapshotBytes, err = snapshotSize(leader.DataDir, snap.index); err != nil {
		return err
	}
	b.logf("scale: snapshot at index %d: %d bytes in %.2fs", snap.index, sc.SnapshotBytes, sc.SnapshotS)
	if sc.LeaderPeakRSS, err = procPeakRSS(leader.Pid()); err != nil {
		return err
	}
	sc.FollowerPeakRSS, _ = procPeakRSS(followers[0].Pid())

	// Restore: a follower restarts from its own latest snapshot.
	f := followers[0]
	if _, err := waitSnapshot(ctx, f, last-scaleSnapshotThreshold, snapWait); err != nil {
		return err
	}
	if err := f.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := f.Wait(30 * time.Second); err != nil {
		b.logf("scale: %s after SIGTERM: %v", f.ID, err)
	}
	restartAt := time.Now()
	if err := f.Restart(); err != nil {
		return err
	}
	if _, err := waitCaughtUp(ctx, cl, f.ID, 120*time.Second); err != nil {
		return err
	}
	sc.RestartCaughtUpS = time.Since(restartAt).Seconds()
	if d, err := restoreTime(f.LogPath, restartAt); err != nil {
		b.logf("scale: restore time: %v", err)
	} else {
		sc.RestoreS, sc.RestoreSeen = d.Seconds(), true
	}
	b.logf("scale: %s restored in %.2fs, caught up %.2fs after restart", f.ID, sc.RestoreS, sc.RestartCaughtUpS)

	// A new replica: the other follower loses its disk and joins again.
	g := followers[1]
	if err := g.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := g.Wait(30 * time.Second); err != nil {
		b.logf("scale: %s after SIGTERM: %v", g.ID, err)
	}
	if err := os.RemoveAll(g.DataDir); err != nil {
		return err
	}
	joinAt := time.Now()
	if err := g.RestartWith("--join", leader.GRPCAddr); err != nil {
		return err
	}
	if _, err := waitCaughtUp(ctx, cl, g.ID, 180*time.Second); err != nil {
		return err
	}
	sc.NewReplicaS = time.Since(joinAt).Seconds()
	sc.NewReplicaByInstall = logHas(g.LogPath, "Installed remote snapshot")
	b.logf("scale: a new replica caught up in %.2fs (snapshot install: %v)", sc.NewReplicaS, sc.NewReplicaByInstall)
	if sc.LeaderPeakRSS, err = procPeakRSS(leader.Pid()); err != nil {
		return err
	}
	if p := cl.Unexpected(); p != nil {
		return fmt.Errorf("%s exited unexpectedly: %v", p.Name, p.Err())
	}
	return nil
}

// logLine is a timestamped line of a replica's log (hclog's format).
type logLine struct {
	at   time.Time
	text string
}

func readLog(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ts, _, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		if err != nil {
			continue
		}
		out = append(out, logLine{at: at, text: line})
	}
	return out, sc.Err()
}

func logHas(path, s string) bool {
	lines, _ := readLog(path)
	return slices.ContainsFunc(lines, func(l logLine) bool { return strings.Contains(l.text, s) })
}

var indexRE = regexp.MustCompile(`index=(\d+)`)

type snapshotDone struct {
	index uint64
	took  time.Duration
}

// waitSnapshot waits until the replica's log shows a completed snapshot at
// an index of at least min, and returns the first such.
func waitSnapshot(ctx context.Context, r *localcluster.Replica, min uint64, timeout time.Duration) (snapshotDone, error) {
	deadline := time.Now().Add(timeout)
	for {
		lines, err := readLog(r.LogPath)
		if err != nil {
			return snapshotDone{}, err
		}
		started := map[uint64]time.Time{}
		for _, l := range lines {
			m := indexRE.FindStringSubmatch(l.text)
			if m == nil {
				continue
			}
			idx, _ := strconv.ParseUint(m[1], 10, 64)
			switch {
			case strings.Contains(l.text, "starting snapshot up to"):
				started[idx] = l.at
			case strings.Contains(l.text, "snapshot complete up to") && idx >= min:
				if s, ok := started[idx]; ok {
					return snapshotDone{index: idx, took: l.at.Sub(s)}, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return snapshotDone{}, fmt.Errorf("%s: no snapshot at index >= %d within %v", r.ID, min, timeout)
		}
		select {
		case <-ctx.Done():
			return snapshotDone{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// snapshotSize reads the size of the snapshot at index from its meta.json
// (hashicorp/raft's FileSnapshotStore: DIR/snapshots/TERM-INDEX-MS/).
func snapshotSize(dataDir string, index uint64) (int64, error) {
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", fmt.Sprintf("*-%d-*", index), "meta.json"))
	if len(dirs) == 0 {
		return 0, fmt.Errorf("no snapshot of index %d in %s", index, dataDir)
	}
	data, err := os.ReadFile(dirs[0])
	if err != nil {
		return 0, err
	}
	var meta struct{ Size int64 }
	if err := json.Unmarshal(data, &meta); err != nil {
		return 0, fmt.Errorf("%s: %w", dirs[0], err)
	}
	return meta.Size, nil
}

// restoreTime finds, in the log after since, hashicorp/raft's "starting
// restore from snapshot" and "restored from snapshot" and returns the time
// between them.
func restoreTime(path string, since time.Time) (time.Duration, error) {
	lines, err := readLog(path)
	if err != nil {
		return 0, err
	}
	var start time.Time
	for _, l := range lines {
		if l.at.Before(since.Add(-time.Second)) {
			continue
		}
		switch {
		case strings.Contains(l.text, "starting restore from snapshot"):
			start = l.at
		case strings.Contains(l.text, "restored from snapshot") && !start.IsZero():
			return l.at.Sub(start), nil
		}
	}
	return 0, fmt.Errorf("%s: no restore from a snapshot after %s", path, since.Format(time.RFC3339))
}
