package coordclient_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// TestOnGuardSeesEveryCheck checks that OnGuard reports accepted and
// rejected replies and hints, in order, with the highest term seen before.
func TestOnGuardSeesEveryCheck(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	a.SetTerm(7)
	b.SetTerm(8)
	c := newClient(t, a.Addr(), b.Addr())
	var mu sync.Mutex
	var got []coordclient.GuardEvent
	c.OnGuard(func(g coordclient.GuardEvent) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, g)
	})
	c.OnGuard(nil) // ignored

	_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)
	// a is deposed: its late answer (term 5) is rejected, b answers.
	a.SetTerm(5)
	b.Add("run", &rolloutv1.SubmitItem{Id: []byte("fresh"), Index: 1, Payload: []byte(`{}`)})
	_, err = c.Claim(ctxFor(t, 10*time.Second), &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4, WaitMs: 100})
	require.NoError(t, err)
	// b now says it follows a (a hint of term 8).
	b.SetFollower(a.Addr())
	a.SetTerm(9)
	_, err = c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	want := []coordclient.GuardEvent{
		{Method: "Heartbeat", Addr: a.Addr(), Term: 7, Highest: 0},
		{Method: "Claim", Addr: a.Addr(), Term: 5, Highest: 7, Rejected: true},
		{Method: "Claim", Addr: b.Addr(), Term: 8, Highest: 7},
		{Method: "Heartbeat", Addr: b.Addr(), Hint: true, Term: 8, Highest: 8},
		{Method: "Heartbeat", Addr: a.Addr(), Term: 9, Highest: 8},
	}
	require.Equal(t, want, got)
	require.Equal(t, uint64(1), c.Guard().Rejected())
}
