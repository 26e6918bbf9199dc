package rolloutv1_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

func TestIsNotRegistered(t *testing.T) {
	err := rolloutv1.NotRegisteredError("w1")
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, err.Error(), `worker "w1" is not registered; call Register first`)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the status", err, true},
		{"wrapped", fmt.Errorf("call: %w", err), true},
		{"through the wire", status.FromProto(status.Convert(err).Proto()).Err(), true},
		{"nil", nil, false},
		{"not a status", errors.New("worker is not registered"), false},
		{"another failed precondition", status.Error(codes.FailedPrecondition, "worker \"w1\" is not registered"), false},
		{"another code", status.Error(codes.NotFound, "no"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rolloutv1.IsNotRegistered(tc.err))
		})
	}
}
