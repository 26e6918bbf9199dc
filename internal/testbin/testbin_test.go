package testbin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGoBuildErrors(t *testing.T) {
	root, err := ModuleRoot()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.ErrorIs(t, GoBuild(ctx, root, t.TempDir(), nil), ErrInvalid)
	err = GoBuild(ctx, root, t.TempDir(), []string{"some_tag"}, "./no/such/package")
	require.Error(t, err)
	require.ErrorContains(t, err, "-tags some_tag")
	require.ErrorContains(t, err, "no/such/package")
}
