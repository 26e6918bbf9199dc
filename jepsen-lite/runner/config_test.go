package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/runner"
)

func valid() runner.Config {
	cfg := runner.DefaultConfig()
	cfg.BinDir, cfg.OutDir = "bin", "out"
	return cfg
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, valid().Validate())
	hostileOK := valid()
	hostileOK.Nemeses = append(hostileOK.Nemeses, nemesis.Hostile)
	require.NoError(t, hostileOK.Validate())
	require.True(t, runner.DefaultConfig().TLS, "mutual TLS by default")
	tests := []struct {
		name   string
		mutate func(*runner.Config)
		want   string
	}{
		{"bin", func(c *runner.Config) { c.BinDir = "" }, "BinDir"},
		{"out", func(c *runner.Config) { c.OutDir = "" }, "OutDir"},
		{"duration", func(c *runner.Config) { c.Duration = 0 }, "Duration"},
		{"replicas", func(c *runner.Config) { c.Replicas = 0 }, "Replicas"},
		{"workers", func(c *runner.Config) { c.Workers = 99 }, "Workers"},
		{"runs", func(c *runner.Config) { c.Runs = 0 }, "Runs"},
		{"range runs negative", func(c *runner.Config) { c.RangeRuns = -1 }, "RangeRuns"},
		{"range runs too many", func(c *runner.Config) { c.RangeRuns = 5 }, "RangeRuns"},
		{"tenants negative", func(c *runner.Config) { c.Tenants = -1 }, "Tenants must be 0..3"},
		{"tenants too many", func(c *runner.Config) { c.Tenants = 4 }, "Tenants must be 0..3"},
		{"items", func(c *runner.Config) { c.ItemsPerRun = -1 }, "ItemsPerRun"},
		{"failure timeout", func(c *runner.Config) { c.FailureTimeout = time.Millisecond }, "FailureTimeout"},
		{"bound", func(c *runner.Config) { c.CompletionBound = 0 }, "CompletionBound"},
		{"scenario", func(c *runner.Config) { c.Scenario = "nap" }, "Scenario"},
		{"net", func(c *runner.Config) { c.Net = "wifi" }, "Net"},
		{"nemesis", func(c *runner.Config) { c.Nemeses = append(c.Nemeses, "boom") }, "boom"},
		{"hostile without TLS", func(c *runner.Config) { c.Nemeses, c.TLS = append(c.Nemeses, nemesis.Hostile), false }, "mutual TLS"},
		{"hostile with one worker", func(c *runner.Config) { c.Nemeses, c.Workers = append(c.Nemeses, nemesis.Hostile), 1 }, "2 workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.ErrorIs(t, err, runner.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
			_, err = runner.Run(context.Background(), cfg)
			require.ErrorIs(t, err, runner.ErrInvalidConfig, "Run validates before touching anything")
		})
	}
}

func TestShapeAndPrefix(t *testing.T) {
	cfg := valid()
	cfg.Replicas, cfg.Workers = 5, 2
	r, w := runner.Shape(cfg)
	require.Equal(t, []string{"c1", "c2", "c3", "c4", "c5"}, r)
	require.Equal(t, []string{"w1", "w2"}, w)
	cfg.Scenario = runner.ScenarioStaleLeader
	r, w = runner.Shape(cfg)
	require.Equal(t, []string{"c1", "c2", "c3"}, r)
	require.Equal(t, []string{"w1"}, w)
	cfg.Scenario = runner.ScenarioStraggler
	_, w = runner.Shape(cfg)
	require.Len(t, w, 2)
	cfg.Scenario = runner.ScenarioFederation
	r, w = runner.Shape(cfg)
	require.Equal(t, []string{"a1", "a2", "a3", "b1", "b2", "b3"}, r, "the parent's and the peer's replicas")
	require.Equal(t, []string{"w1", "w2"}, w, "the peer's workers")

	p := runner.Prefix("/some/dir")
	require.Equal(t, p, runner.Prefix("/some/dir"), "one out directory, one prefix")
	require.NotEqual(t, p, runner.Prefix("/other/dir"))
	require.Len(t, p, 10)
	require.Regexp(t, `^jl[0-9a-f]{8}$`, p)
	require.Len(t, runner.Scenarios(), 4)
}
