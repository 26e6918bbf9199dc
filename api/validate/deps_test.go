package validate

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
)

func depItem(self byte, index uint64, deps ...[]byte) *rolloutv1.SubmitItem {
	return &rolloutv1.SubmitItem{Id: id(self), Index: index, Payload: []byte(`{}`), DependsOn: deps}
}

func TestDeps(t *testing.T) {
	l := DefaultLimits()
	many := make([][]byte, limits.MaxDepsPerItem+1)
	for i := range many {
		many[i] = bytes.Repeat([]byte{byte(i), byte(i >> 8)}, DefaultIDBytes/2)
	}
	for _, tc := range []struct {
		name string
		it   *rolloutv1.SubmitItem
		want string // "" when valid
	}{
		{"none", depItem(1, 0), ""},
		{"two", depItem(1, 0, id(2), id(3)), ""},
		{"at the limit", depItem(1, 0, many[:limits.MaxDepsPerItem]...), ""},
		{"over the limit", depItem(1, 0, many...), "257 dependencies, the limit is 256"},
		{"short id", depItem(1, 0, id(2), []byte("x")), "depends_on[1] is 1 bytes, must be exactly 32"},
		{"itself", depItem(1, 0, id(1)), "depends_on[0] is the item itself"},
		{"twice", depItem(1, 0, id(2), id(3), id(2)), "depends_on[2] repeats depends_on[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.Item(4, tc.it)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrDeps)
			var ie *ItemError
			require.True(t, errors.As(err, &ie))
			require.Equal(t, 4, ie.Pos)
			require.ErrorContains(t, err, tc.want)
			// CheckRequest refuses the same request as a whole.
			req := &rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{tc.it}}
			require.ErrorIs(t, l.CheckRequest(req), ErrDeps)
		})
	}
}

func TestDepsClosed(t *testing.T) {
	items := []*rolloutv1.SubmitItem{depItem(1, 0), depItem(2, 1, id(1)), depItem(3, 2, id(2), id(9))}
	err := DepsClosed(items, nil)
	require.ErrorIs(t, err, ErrDeps)
	require.ErrorContains(t, err, "items[2] (index 2")
	require.ErrorContains(t, err, "depends_on[1]")
	require.NoError(t, DepsClosed(items, func(b []byte) bool { return bytes.Equal(b, id(9)) }))
	// A dependency later in the request is not earlier.
	err = DepsClosed([]*rolloutv1.SubmitItem{depItem(2, 1, id(1)), depItem(1, 0)}, nil)
	require.ErrorIs(t, err, ErrDeps)
	require.ErrorContains(t, err, "items[0]")
	// CheckRequest leaves references to the ledger: an earlier request may
	// hold them.
	req := &rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{depItem(3, 2, id(9))}}
	require.NoError(t, DefaultLimits().CheckRequest(req))
}

func TestSpecKind(t *testing.T) {
	l := DefaultLimits()
	require.NoError(t, l.Spec(&rolloutv1.RunSpec{Kind: "train"}))
	require.ErrorIs(t, l.Spec(&rolloutv1.RunSpec{Kind: string(bytes.Repeat([]byte("k"), limits.MaxKindBytes+1))}), ErrTooLarge)
	require.ErrorIs(t, l.Spec(&rolloutv1.RunSpec{Kind: "a\nb"}), ErrSpec)
}

// TestSpecTenantAndPriority: a spec's priority is 0 to 5 and its tenant a
// name by the rules of a run name; each refusal names the field.
func TestSpecTenantAndPriority(t *testing.T) {
	l := DefaultLimits()
	require.NoError(t, l.Spec(&rolloutv1.RunSpec{Tenant: "team-a", Priority: 5}))
	require.NoError(t, l.Spec(&rolloutv1.RunSpec{Priority: 0}))
	err := l.Spec(&rolloutv1.RunSpec{Priority: 6})
	require.ErrorIs(t, err, ErrSpec)
	require.ErrorContains(t, err, "spec priority is 6, must be 1 (lowest) to 5 (highest)")
	err = l.Spec(&rolloutv1.RunSpec{Tenant: " team"})
	require.ErrorIs(t, err, ErrSpec)
	require.ErrorContains(t, err, "spec tenant: ")
	require.ErrorContains(t, err, "tenant name")
	require.ErrorIs(t, l.Tenant(""), ErrTenant)
	require.ErrorContains(t, l.Tenant(""), "tenant name is empty")
	require.Error(t, l.Tenant(string(bytes.Repeat([]byte("t"), l.MaxRunNameBytes+1))))
	require.NoError(t, l.Tenant("gw.key_1"))
}
