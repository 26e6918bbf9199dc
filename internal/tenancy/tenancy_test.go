package tenancy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/tenancy"
)

// TestSubmitAs: the rule of every role, and errors naming both identities.
func TestSubmitAs(t *testing.T) {
	bob := mtls.Identity{Name: "bob", Role: mtls.RoleClient}
	gw := mtls.Identity{Name: "gw", Role: mtls.RoleGateway}
	ops := mtls.Identity{Name: "ops", Role: mtls.RoleAdmin}
	for _, tc := range []struct {
		id    mtls.Identity
		named string
		want  string
		err   error
	}{
		{bob, "", "bob", nil},
		{bob, "bob", "bob", nil},
		{bob, "alice", "", tenancy.ErrOtherTenant},
		{gw, "", "gw", nil},
		{gw, "alice", "alice", nil},
		{ops, "", "", nil},
		{ops, "alice", "alice", nil},
		{mtls.Identity{}, "", "", nil},
		{mtls.Identity{}, "alice", "alice", nil},
		{mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, "", "", tenancy.ErrMayNotSubmit},
		{mtls.Identity{Name: "c1", Role: mtls.RoleReplica}, "alice", "", tenancy.ErrMayNotSubmit},
		{mtls.Identity{Name: "a", Role: mtls.RolePeer}, "", "a", nil},
		{mtls.Identity{Name: "a", Role: mtls.RolePeer}, "a", "a", nil},
		{mtls.Identity{Name: "a", Role: mtls.RolePeer}, "alice", "", tenancy.ErrOtherTenant},
	} {
		got, err := tenancy.SubmitAs(tc.id, tc.named)
		require.ErrorIs(t, err, tc.err, "%v naming %q", tc.id, tc.named)
		require.Equal(t, tc.want, got, "%v naming %q", tc.id, tc.named)
	}
	_, err := tenancy.SubmitAs(bob, "alice")
	require.ErrorContains(t, err, `the certificate "bob" (role client) may not submit for tenant "alice"`)
	_, err = tenancy.SubmitAs(mtls.Identity{Name: "a", Role: mtls.RolePeer}, "alice")
	require.ErrorContains(t, err, `the peer certificate "a" (another cluster) submits as tenant "a" only, not "alice"`)

	require.Equal(t, "ops", tenancy.Creator(ops, ""))
	require.Equal(t, "alice", tenancy.Creator(ops, "alice"))
	require.Equal(t, "", tenancy.Creator(mtls.Identity{}, ""))

	require.NoError(t, tenancy.CheckOwner("alice", "alice"))
	require.NoError(t, tenancy.CheckOwner("", "alice"))
	err = tenancy.CheckOwner("bob", "alice")
	require.ErrorIs(t, err, tenancy.ErrNotOwner)
	require.ErrorContains(t, err, `the submit acts as tenant "bob", the run belongs to tenant "alice"`)
}
