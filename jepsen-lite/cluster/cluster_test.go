package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/cluster"
)

// placement is a Placement with scripted answers.
type placement struct {
	addrs cluster.ReplicaAddrs
	err   error
}

func (p placement) ReplicaAddrs(string) (cluster.ReplicaAddrs, error) { return p.addrs, p.err }

func (p placement) Command(_, bin string, args []string) []string {
	return append([]string{bin}, args...)
}

func TestStartRejectsBadPlacement(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		p    placement
		want error
	}{
		{"placement error", placement{err: boom}, boom},
		{"no bind address", placement{addrs: cluster.ReplicaAddrs{RaftBind: "10.0.0.1:1"}}, cluster.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := cluster.Start(ctx, cluster.Config{BinDir: t.TempDir(), Dir: t.TempDir(), Placement: tt.p})
			require.ErrorIs(t, err, tt.want)
		})
	}
	_, err := cluster.Start(context.Background(), cluster.Config{})
	require.ErrorIs(t, err, cluster.ErrInvalidConfig)
}

func TestGoBuildErrors(t *testing.T) {
	root, err := cluster.ModuleRoot()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.ErrorIs(t, cluster.GoBuild(ctx, root, t.TempDir(), nil), cluster.ErrInvalidConfig)
	err = cluster.GoBuild(ctx, root, t.TempDir(), []string{"some_tag"}, "./no/such/package")
	require.Error(t, err)
	require.ErrorContains(t, err, "-tags some_tag")
	require.ErrorContains(t, err, "no/such/package")
}
