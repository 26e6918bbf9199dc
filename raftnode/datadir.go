package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// replicaIDFile is the file in DataDir that records which replica the
// directory belongs to: the replica id and a newline.
const replicaIDFile = "replica-id"

// prepareDataDir creates DataDir (0700) and its snapshot directory on a
// first start. When raft.db already exists, the snapshot directory must
// exist too (New creates both together): a missing one was deleted, and the
// log in raft.db may start after a snapshot that is now gone.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("raftnode: create DataDir: %w", err)
	}
	snapPath := filepath.Join(dir, snapshotDir)
	_, dbErr := os.Stat(filepath.Join(dir, dbFile))
	fi, err := os.Stat(snapPath)
	switch {
	case errors.Is(err, os.ErrNotExist) && dbErr == nil:
		return fmt.Errorf("%w: %s does not exist but %s does: the snapshot directory was deleted; "+
			"restore it, or remove this replica from its cluster and add it back with an empty data directory",
			ErrSnapshotStore, snapPath, filepath.Join(dir, dbFile))
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(snapPath, 0o700); err != nil {
			return fmt.Errorf("%w: create %s: %v", ErrSnapshotStore, snapPath, err)
		}
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrSnapshotStore, snapPath, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrSnapshotStore, snapPath)
	}
	if _, err := os.ReadDir(snapPath); err != nil {
		return fmt.Errorf("%w: %s is not readable: %v", ErrSnapshotStore, snapPath, err)
	}
	return nil
}

// claimDataDir makes dir remember replica id: on a first start (no
// replica-id file) it writes the file atomically; on later starts the file
// must name id, else ErrReplicaIDMismatch. A directory from before the file
// existed (raft state, no replica-id) is adopted the same way, unless its
// raft configuration shows it belongs to another replica: one that lists
// another id at addr (this node's advertised raft address) and not id, the
// signature of a replica started under a new id. Call it while holding raft.db's lock,
// so two processes cannot race on the file.
func claimDataDir(dir, id, addr string, logs raft.LogStore, snaps raft.SnapshotStore, hasState bool, logger hclog.Logger) error {
	path := filepath.Join(dir, replicaIDFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if hasState {
			if err := checkAdoption(dir, id, addr, logs, snaps, logger); err != nil {
				return err
			}
		}
		if err := writeFileAtomic(path, []byte(id+"\n")); err != nil {
			return fmt.Errorf("raftnode: record the replica id in %s: %w", path, err)
		}
		logger.Info("recorded the replica id in the data directory", "id", id, "path", path, "adopted", hasState)
		return nil
	case err != nil:
		return fmt.Errorf("raftnode: read %s: %w", path, err)
	}
	recorded, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(recorded) == 0 {
		return fmt.Errorf("%w: %s is damaged (%q is not an id and a newline); it must name the replica %s belongs to",
			ErrReplicaIDMismatch, path, b, dir)
	}
	if string(recorded) != id {
		return fmt.Errorf("%w: %s belongs to replica %q (its %s), not %q: start it as %q, or give %q an empty data directory",
			ErrReplicaIDMismatch, dir, recorded, replicaIDFile, id, recorded, id)
	}
	return nil
}

// checkAdoption refuses to adopt a data directory whose latest raft
// configuration lists another id at addr and not id. A configuration that
// cannot be read is left to raft to report.
func checkAdoption(dir, id, addr string, logs raft.LogStore, snaps raft.SnapshotStore, logger hclog.Logger) error {
	conf, err := latestConfiguration(logs, snaps)
	if err != nil {
		logger.Warn("cannot read the raft configuration to check the data directory's replica", "dir", dir, "error", err)
		return nil
	}
	var other raft.ServerID
	for _, s := range conf.Servers {
		if string(s.ID) == id {
			return nil
		}
		if string(s.Address) == addr {
			other = s.ID
		}
	}
	if other == "" {
		return nil
	}
	return fmt.Errorf("%w: %s holds the raft state of replica %q (its raft configuration lists %q at %s, this replica's address, and not %q): start it as %q, or give %q an empty data directory",
		ErrReplicaIDMismatch, dir, other, other, addr, id, other, id)
}

// latestConfiguration is the raft configuration raft will start from: the
// newest snapshot's, overridden by each configuration entry in the log
// after it.
func latestConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (conf raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil { // raft.DecodeConfiguration panics on bad data
			err = fmt.Errorf("decode a configuration entry: %v", r)
		}
	}()
	first, err := logs.FirstIndex()
	if err != nil {
		return conf, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return conf, err
	}
	metas, err := snaps.List()
	if err != nil {
		return conf, err
	}
	if len(metas) > 0 {
		conf = metas[0].Configuration
		first = max(first, metas[0].Index+1)
	}
	for i := first; i > 0 && i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return conf, fmt.Errorf("log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			conf = raft.DecodeConfiguration(l.Data)
		}
	}
	return conf, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory, synced and renamed over path, then syncs the directory: after
// a crash path holds either nothing or all of data.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkSnapshotCovers refuses a log that starts after index 1 (it was
// compacted) unless the snapshot store holds a snapshot reaching the entry
// just before the log's first one. Without it raft could not rebuild the
// state (hashicorp/raft panics reading the missing entries).
func checkSnapshotCovers(dir string, logs raft.LogStore, snaps raft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftnode: read the first log index of %s: %w", filepath.Join(dir, dbFile), err)
	}
	if first <= 1 {
		return nil
	}
	snapPath := filepath.Join(dir, snapshotDir)
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSnapshotStore, snapPath, err)
	}
	have := "there is none"
	if len(metas) > 0 {
		if metas[0].Index >= first-1 {
			return nil
		}
		have = fmt.Sprintf("the newest there ends at index %d", metas[0].Index)
	}
	return fmt.Errorf("%w: the log in %s starts at index %d, so it needs a snapshot in %s ending at index %d or later, but %s: "+
		"the snapshots were deleted; restore them, or remove this replica from its cluster and add it back with an empty data directory",
		ErrSnapshotStore, filepath.Join(dir, dbFile), first, snapPath, first-1, have)
}
