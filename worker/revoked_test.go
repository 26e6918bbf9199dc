package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
)

// TestRevokedWorkerStops: once a call is refused because the worker's
// certificate is revoked, Run returns at once (it does not drain, report or
// deregister: nothing would be accepted) with ErrRevoked wrapping the
// refusal, which names the revocation; a worker refused at Register stops
// the same way.
func TestRevokedWorkerStops(t *testing.T) {
	revoked := func(method string) error {
		return rolloutv1.RevokedError(method, rolloutv1.Revoked{Name: wid, Role: "worker", By: "ops", Reason: "key leaked", RevokedAt: time.Now()})
	}
	for _, at := range []string{"Claim", "Register"} {
		t.Run(at, func(t *testing.T) {
			srv := coordtest.Start(t, "a")
			srv.Add("run", subs(4)...)
			srv.Intercept(at, func(context.Context, any) (any, error) { return nil, revoked("/rollout.v1.Coordinator/" + at) })
			r := start(t, testConfig(), newRecorder(mockFn(t)), srv.Addr())
			select {
			case err := <-r.done:
				r.done <- err // for the cleanup
				require.ErrorIs(t, err, worker.ErrRevoked)
				require.ErrorIs(t, err, coordclient.ErrRevoked)
				rev, ok := coordclient.RevokedOf(err)
				require.True(t, ok, "%v", err)
				require.Equal(t, "key leaked", rev.Reason)
			case <-time.After(20 * time.Second):
				t.Fatal("the revoked worker did not stop")
			}
			require.Zero(t, srv.Calls("Deregister"), "a revoked worker does not deregister")
		})
	}
	// Any other final refusal keeps the worker running.
	srv := coordtest.Start(t, "a")
	srv.Intercept("Steal", func(context.Context, any) (any, error) { return nil, errors.New("boom") })
	r := start(t, testConfig(), newRecorder(mockFn(t)), srv.Addr())
	require.Eventually(t, func() bool { return srv.Calls("Claim") > 2 }, 20*time.Second, 10*time.Millisecond)
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the worker stopped: %v", err)
	default:
	}
}
