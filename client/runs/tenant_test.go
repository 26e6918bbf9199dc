package runs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/tenancy"
	"github.com/rollout/rollout/store"
)

// storeKeys lists every object key in st.
func storeKeys(t *testing.T, st *store.Store) []string {
	t.Helper()
	var keys []string
	require.NoError(t, st.List(context.Background(), "", func(o store.Object) error {
		keys = append(keys, o.Key)
		return nil
	}))
	return keys
}

// TestSubmitRefusesAnotherTenantBeforeUpload: a client certificate naming
// another tenant, and a submit acting as one tenant into another's run,
// are refused before the cluster is asked to submit and before anything
// goes into the store, naming both identities.
func TestSubmitRefusesAnotherTenantBeforeUpload(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	bob := mtls.Identity{Name: "bob", Role: mtls.RoleClient}
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.Identity, cfg.Tenant = "r", []string{writeInput(t, 5)}, st, bob, "alice"
	_, err := runs.Submit(ctx, fake, cfg)
	require.ErrorIs(t, err, runs.ErrSubmitRefused)
	require.ErrorIs(t, err, tenancy.ErrOtherTenant)
	require.ErrorContains(t, err, `the certificate "bob" (role client) may not submit for tenant "alice"`)
	require.ErrorContains(t, err, "nothing was uploaded")
	require.Empty(t, storeKeys(t, st), "nothing was uploaded")
	require.Empty(t, fake.Runs)
	require.Zero(t, fake.Statuses, "refused before the cluster was asked anything")

	// alice's run; a gateway submitting for bob into it is refused before
	// the upload of its (other) input.
	alice := mtls.Identity{Name: "alice", Role: mtls.RoleClient}
	cfg.Identity, cfg.Tenant = alice, ""
	_, err = runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	fake.Runs["r"].Spec.Tenant = "alice" // as the ledger records it
	before := storeKeys(t, st)
	other := cfg
	other.Files = []string{writeInput(t, 9)}
	other.Identity, other.Tenant = mtls.Identity{Name: "gw", Role: mtls.RoleGateway}, "bob"
	_, err = runs.Submit(ctx, fake, other)
	require.ErrorIs(t, err, runs.ErrSubmitRefused)
	require.ErrorIs(t, err, tenancy.ErrNotOwner)
	require.ErrorContains(t, err, `the submit acts as tenant "bob", the run belongs to tenant "alice"`)
	require.Equal(t, before, storeKeys(t, st), "nothing more was uploaded")
	require.Len(t, fake.Runs["r"].Items, 5)

	// An admin naming no tenant adds to anyone's run; alice resumes her own.
	other.Identity, other.Tenant = mtls.Identity{Name: "ops", Role: mtls.RoleAdmin}, ""
	_, err = runs.Submit(ctx, fake, other)
	require.NoError(t, err)
	require.Len(t, fake.Runs["r"].Items, 9)
	_, err = runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)

	// CheckSubmitter (rollout train's check before it stores its payloads).
	require.NoError(t, runs.CheckSubmitter(ctx, fake, "r", alice, "", 0))
	require.NoError(t, runs.CheckSubmitter(ctx, fake, "new", bob, "", 0))
	err = runs.CheckSubmitter(ctx, fake, "new", bob, "alice", 0)
	require.ErrorIs(t, err, tenancy.ErrOtherTenant)
	err = runs.CheckSubmitter(ctx, fake, "r", bob, "", 0)
	require.ErrorIs(t, err, tenancy.ErrNotOwner)
	require.ErrorContains(t, err, `the submit acts as tenant "bob", the run belongs to tenant "alice"`)
}
