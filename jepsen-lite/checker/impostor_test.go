package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
)

// TestImpostorRefused: the verdict passes when every impostor attack was
// refused (inconclusive ones aside), fails on one answered, fails when none
// was judged, and is absent from a history without an impostor attack.
func TestImpostorRefused(t *testing.T) {
	ev := func(got string) history.Event {
		return history.Event{Type: history.TypeHostile, Op: string(hostile.ImpostorCoordinator), Expect: hostile.Refused, Got: got, Detail: "d"}
	}
	other := history.Event{Type: history.TypeHostile, Op: string(hostile.WorkerRaft), Got: hostile.Refused}
	_, ok := impostorRefused(Input{Hostile: true, Events: []history.Event{other}})
	require.False(t, ok, "no verdict without an impostor attack")

	v, ok := impostorRefused(Input{Hostile: true, Events: []history.Event{ev(hostile.Refused), ev(hostile.Inconclusive), ev(hostile.Refused)}})
	require.True(t, ok)
	require.True(t, v.OK, "%+v", v)
	require.Contains(t, v.Detail, "3 impostor coordinators, 2 refused")

	v, _ = impostorRefused(Input{Hostile: true, Events: []history.Event{ev(hostile.Refused), ev(hostile.Answered)}})
	require.False(t, v.OK)
	require.Equal(t, 1, v.Count)

	v, _ = impostorRefused(Input{Hostile: true, Events: []history.Event{ev(hostile.Inconclusive)}})
	require.False(t, v.OK, "an attack never judged proves nothing")
}
