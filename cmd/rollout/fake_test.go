package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs/runstest"
)

// fakeCoord is the in-memory coordinator of the CLI's tests.
type fakeCoord = runstest.Coordinator

var _ coordConn = (*fakeCoord)(nil)

func newFakeCoord() *fakeCoord { return runstest.New() }

// connectFake returns an app.connect that hands out f and records the
// config in got (when not nil).
func connectFake(f *fakeCoord, got *coordclient.Config) func(coordclient.Config) (coordConn, error) {
	return func(cfg coordclient.Config) (coordConn, error) {
		if got != nil {
			*got = cfg
		}
		return f, nil
	}
}

// payloadOf returns the bytes of a submitted item's payload: inline, or
// read from the run's store through its payload_ref.
func payloadOf(t *testing.T, fake *fakeCoord, run string, it *rolloutv1.SubmitItem) []byte {
	t.Helper()
	ref := it.GetPayloadRef()
	if ref == nil {
		return it.GetPayload()
	}
	require.Empty(t, it.GetPayload(), "an item has a payload or a payload_ref")
	st := fake.Runs[run].Store
	require.NotNil(t, st, "run %q references its payloads but has no store", run)
	b, err := st.ReadRange(context.Background(), ref.GetObject(), int64(ref.GetOffset()), int64(ref.GetLength()))
	require.NoError(t, err)
	return b
}
