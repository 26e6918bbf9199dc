package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
)

// storeKeys lists every object of the file store in dir, sorted.
func storeKeys(t *testing.T, dir string) []string {
	t.Helper()
	st, err := store.Open(context.Background(), "file://"+dir, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	var keys []string
	require.NoError(t, st.List(context.Background(), "", func(o store.Object) error {
		keys = append(keys, o.Key)
		return nil
	}))
	sort.Strings(keys)
	return keys
}

// TestSubmitOtherTenantRefusedBeforeUpload: on a real 3-replica cluster
// over mutual TLS, with two client certificates alice and bob, the CLI
// refuses before it uploads anything (the store stays as it was, the
// ledger holds no new run) and names both identities:
//
//   - bob's submit --tenant alice (before: refused by the ledger only after
//     the input chunks were uploaded);
//   - bob's submit into alice's run;
//   - the gateway's submit for tenant bob into alice's run.
//
// alice's own submits go through.
func TestSubmitOtherTenantRefusedBeforeUpload(t *testing.T) {
	c := startCluster(t)
	require.NoError(t, mtls.IssueCerts(c.TLSDir(), []mtls.Cert{{Name: "alice", Role: mtls.RoleClient}, {Name: "bob", Role: mtls.RoleClient}}, nil, time.Hour))
	storeDir := t.TempDir()
	storeFlag := "file://" + storeDir
	input, _ := writeInput(t, 20)

	out, err := cliAs(t, c, "bob", "submit", "--input", input, "--run", "bobs-for-alice", "--tenant", "alice", "--store", storeFlag)
	require.Error(t, err, out)
	t.Logf("bob's submit --tenant alice: %s", out)
	require.Contains(t, out, `the certificate "bob" (role client) may not submit for tenant "alice"`)
	require.Contains(t, out, "nothing was uploaded")
	require.Empty(t, storeKeys(t, storeDir), "nothing was written to the store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = runStatus(ctx, c, "bobs-for-alice")
	require.Equal(t, codes.NotFound, status.Code(err), "the ledger holds no such run: %v", err)

	out, err = cliAs(t, c, "alice", "submit", "--input", input, "--run", "alices", "--store", storeFlag)
	require.NoError(t, err, out)
	rc, err := runStatus(ctx, c, "alices")
	require.NoError(t, err)
	require.Equal(t, "alice", rc.GetTenant())
	before := storeKeys(t, storeDir)
	require.NotEmpty(t, before)

	other, _ := writeInput(t, 30) // other lines: their chunks are not in the store yet
	out, err = cliAs(t, c, "bob", "submit", "--input", other, "--run", "alices", "--store", storeFlag)
	require.Error(t, err, out)
	t.Logf("bob's submit into alice's run: %s", out)
	require.Contains(t, out, `belongs to tenant "alice"`)
	require.Contains(t, out, `"bob"`)
	require.Equal(t, before, storeKeys(t, storeDir), "nothing more was written to the store")

	out, err = cliAs(t, c, "gateway", "submit", "--input", other, "--run", "alices", "--tenant", "bob", "--store", storeFlag)
	require.Error(t, err, out)
	t.Logf("the gateway's submit for bob into alice's run: %s", out)
	require.Contains(t, out, `by the certificate "gateway" (role gateway): the run belongs to another tenant: the submit acts as tenant "bob", the run belongs to tenant "alice"`)
	require.Contains(t, out, "nothing was uploaded")
	require.Equal(t, before, storeKeys(t, storeDir), "nothing more was written to the store")
	rc, err = runStatus(ctx, c, "alices")
	require.NoError(t, err)
	require.EqualValues(t, 20, rc.GetTotal(), "alice's run is as she submitted it")

	out, err = cliAs(t, c, "alice", "submit", "--input", input, "--run", "alices", "--store", storeFlag)
	require.NoError(t, err, "alice resumes her own run: %s", out)
}
