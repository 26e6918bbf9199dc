package raftnode

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	require.Equal(t, 200*time.Millisecond, c.HeartbeatTimeout)
	require.Equal(t, 200*time.Millisecond, c.ElectionTimeout)
	require.Equal(t, 100*time.Millisecond, c.LeaderLeaseTimeout)
	require.Equal(t, 2, c.SnapshotRetain)
	require.Equal(t, 512, c.MaxBatchCommands)
	require.Equal(t, 8<<20, c.MaxBatchBytes)
	require.Equal(t, 4, c.MaxInflightBatches)
	// The defaults alone lack the required fields, and say so.
	err := c.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	for _, field := range []string{"ID", "DataDir", "RaftAddr", "EncodeBatch", "EpochCommand"} {
		require.ErrorContains(t, err, field)
	}
	require.NotContains(t, err.Error(), "HeartbeatTimeout")
}

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.ID = "n1"
		c.DataDir = "data"
		c.RaftAddr = "127.0.0.1:7000"
		c.EncodeBatch = testEncodeBatch
		c.EpochCommand = testEpochCommand
		return c
	}
	require.NoError(t, valid().Validate())

	tests := []struct {
		name   string
		mutate func(*Config)
		field  string // "" means valid
	}{
		{"empty id", func(c *Config) { c.ID = "" }, "ID:"},
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "DataDir:"},
		{"empty raft addr", func(c *Config) { c.RaftAddr = "" }, "RaftAddr:"},
		{"raft addr without port", func(c *Config) { c.RaftAddr = "127.0.0.1" }, "RaftAddr:"},
		{"raft addr bad port", func(c *Config) { c.RaftAddr = "127.0.0.1:99999" }, "RaftAddr:"},
		{"wildcard bind needs advertise", func(c *Config) { c.RaftAddr = "0.0.0.0:7000" }, "AdvertiseAddr:"},
		{"empty-host bind needs advertise", func(c *Config) { c.RaftAddr = ":7000" }, "AdvertiseAddr:"},
		{"wildcard bind with advertise", func(c *Config) { c.RaftAddr = "0.0.0.0:7000"; c.AdvertiseAddr = "10.0.0.1:7000" }, ""},
		{"ephemeral port", func(c *Config) { c.RaftAddr = "127.0.0.1:0" }, ""},
		{"advertise unspecified", func(c *Config) { c.AdvertiseAddr = "[::]:7000" }, "AdvertiseAddr:"},
		{"advertise port zero", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" }, "AdvertiseAddr:"},
		{"advertise malformed", func(c *Config) { c.AdvertiseAddr = "10.0.0.1" }, "AdvertiseAddr:"},
		{"heartbeat too low", func(c *Config) { c.HeartbeatTimeout = time.Millisecond; c.LeaderLeaseTimeout = time.Millisecond }, "HeartbeatTimeout:"},
		{"election below heartbeat", func(c *Config) { c.ElectionTimeout = 100 * time.Millisecond }, "ElectionTimeout:"},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, "LeaderLeaseTimeout:"},
		{"lease too low", func(c *Config) { c.LeaderLeaseTimeout = 0 }, "LeaderLeaseTimeout:"},
		{"commit timeout zero", func(c *Config) { c.CommitTimeout = 0 }, "CommitTimeout:"},
		{"snapshot interval zero", func(c *Config) { c.SnapshotInterval = 0 }, "SnapshotInterval:"},
		{"snapshot retain zero", func(c *Config) { c.SnapshotRetain = 0 }, "SnapshotRetain:"},
		{"batch commands zero", func(c *Config) { c.MaxBatchCommands = 0 }, "MaxBatchCommands:"},
		{"batch bytes negative", func(c *Config) { c.MaxBatchBytes = -1 }, "MaxBatchBytes:"},
		{"inflight zero", func(c *Config) { c.MaxInflightBatches = 0 }, "MaxInflightBatches:"},
		{"apply timeout zero", func(c *Config) { c.ApplyTimeout = 0 }, "ApplyTimeout:"},
		{"no encoder", func(c *Config) { c.EncodeBatch = nil }, "EncodeBatch:"},
		{"no epoch command", func(c *Config) { c.EpochCommand = nil }, "EpochCommand:"},
		{"tls without certificate", func(c *Config) { c.TLS = &tls.Config{} }, "TLS: no certificate"},
		{"tls insecure", func(c *Config) {
			c.TLS = &tls.Config{Certificates: []tls.Certificate{{}}, InsecureSkipVerify: true}
		}, "InsecureSkipVerify"},
		{"nil logger is fine", func(c *Config) { c.Logger = nil }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.field)
		})
	}
}

func TestConfigValidateNamesEveryField(t *testing.T) {
	err := Config{LeaderLeaseTimeout: time.Second}.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	for _, field := range []string{
		"ID:", "DataDir:", "RaftAddr:", "HeartbeatTimeout:", "ElectionTimeout:",
		"LeaderLeaseTimeout:", "CommitTimeout:", "SnapshotInterval:", "SnapshotRetain:",
		"MaxBatchCommands:", "MaxBatchBytes:", "MaxInflightBatches:", "ApplyTimeout:",
		"EncodeBatch:", "EpochCommand:",
	} {
		require.ErrorContains(t, err, field)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")

	_, err := New(Config{DataDir: dir}, &testFSM{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.NoDirExists(t, dir, "a rejected config must change nothing")

	cfg := testConfig(t, "n1")
	cfg.DataDir = dir
	_, err = New(cfg, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "fsm")
	require.NoDirExists(t, dir)

	// A DataDir that is a file fails cleanly.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	cfg.DataDir = file
	_, err = New(cfg, &testFSM{})
	require.Error(t, err)
	require.ErrorContains(t, err, "DataDir")

	// A raft address already bound fails cleanly and releases the store.
	cfg = testConfig(t, "n1")
	first, err := New(cfg, &testFSM{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Shutdown(testCtx(t)) })
	cfg2 := testConfig(t, "n2")
	cfg2.RaftAddr = first.Addr()
	_, err = New(cfg2, &testFSM{})
	require.Error(t, err)
	require.ErrorContains(t, err, "bind")
	// The same DataDir can be opened once the failed New has released it.
	cfg2.RaftAddr = "127.0.0.1:0"
	second, err := New(cfg2, &testFSM{})
	require.NoError(t, err)
	require.NoError(t, second.Shutdown(testCtx(t)))
}

func TestNotLeaderError(t *testing.T) {
	var err error = &NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:7002"}
	require.ErrorIs(t, err, ErrNotLeader)
	require.ErrorContains(t, err, "n2")
	require.ErrorContains(t, err, "127.0.0.1:7002")
	var nle *NotLeaderError
	require.True(t, errors.As(err, &nle))
	require.Equal(t, "n2", nle.LeaderID)

	err = &NotLeaderError{}
	require.ErrorIs(t, err, ErrNotLeader)
	require.ErrorContains(t, err, "leader unknown")
	require.NotErrorIs(t, err, ErrShutdown)
}
