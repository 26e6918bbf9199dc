package hostile

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/history"
)

func TestPlanDeterministicAndCovering(t *testing.T) {
	for _, d := range []time.Duration{25 * time.Second, 30 * time.Second, 3 * time.Minute} {
		a := Plan(7, d, 3*time.Second)
		require.Equal(t, a, Plan(7, d, 3*time.Second), "one seed, one schedule")
		require.NotEqual(t, a, Plan(8, d, 3*time.Second), "another seed, another schedule")
		seen := map[Attack]int{}
		for i, s := range a {
			seen[s.Attack]++
			require.GreaterOrEqual(t, s.At, 3*time.Second)
			require.Less(t, s.At, d, "step %d after the end", i)
			if i > 0 {
				require.Greater(t, s.At, a[i-1].At, "in time order")
			}
		}
		for _, k := range AllAttacks() {
			require.Positive(t, seen[k], "%v: %s never planned", d, k)
		}
	}
	require.Empty(t, Plan(1, 3*time.Second, 3*time.Second))
}

func TestExpect(t *testing.T) {
	for _, a := range AllAttacks() {
		e := Expect(a)
		require.NotEmpty(t, e, a)
		require.False(t, Expected(e, "OK"), "%s: success is never a refusal", a)
		require.False(t, Expected(e, "APPLIED"), a)
		require.False(t, Expected(e, Answered), a)
		require.False(t, Expected(e, Inconclusive), a)
	}
	require.True(t, Expected(Expect(ForgeReportOwner), "PermissionDenied"))
	require.True(t, Expected(Expect(ForgeReportCAS), "CAS_MISS"))
	require.False(t, Expected(Expect(OversizeRequest), "Unavailable"), "too large is never Unavailable")
	require.True(t, Expected(Expect(OversizeMessage), "ResourceExhausted"))
	require.True(t, Expected(Expect(WorkerRaft), Refused))
}

func TestConfigValidate(t *testing.T) {
	h, err := history.Create(filepath.Join(t.TempDir(), "h.jsonl"), "hostile")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	ok := Config{Replicas: []Replica{{ID: "c1"}}, Workers: []string{"w1", "w2"}, Runs: []string{"r"}, Ghost: "g",
		TLS: func(string) (*tls.Config, error) { return nil, nil }, History: h}
	require.NoError(t, ok.Validate())
	for name, mutate := range map[string]func(*Config){
		"Replicas":  func(c *Config) { c.Replicas = nil },
		"2 workers": func(c *Config) { c.Workers = c.Workers[:1] },
		"Runs":      func(c *Config) { c.Runs = nil },
		"Ghost":     func(c *Config) { c.Ghost = "w1" },
		"TLS":       func(c *Config) { c.TLS = nil },
		"History":   func(c *Config) { c.History = nil },
		"Window":    func(c *Config) { c.Window = -time.Second },
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			_, err := New(c)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, name)
		})
	}
}

// raftPort starts a real hashicorp/raft NetworkTransport on loopback and
// answers every RPC it decodes the way a replica answers an AppendEntries
// from an older term.
func raftPort(t *testing.T) string {
	t.Helper()
	trans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, time.Second, hclog.NewNullLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = trans.Close() })
	go func() {
		for rpc := range trans.Consumer() {
			req, ok := rpc.Command.(*raft.AppendEntriesRequest)
			if !ok {
				rpc.Respond(nil, nil)
				continue
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term + 5}, nil)
		}
	}()
	return string(trans.LocalAddr())
}

// TestProbeRaft checks the probe against a real Raft transport (its frame
// must decode there), a port that closes every connection, a TLS port that
// refuses the client's certificate and a port nobody listens on.
func TestProbeRaft(t *testing.T) {
	ctx := context.Background()
	got, why := probeRaft(ctx, raftPort(t), nil)
	require.Equal(t, Answered, got, why)

	closing, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = closing.Close() })
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	got, why = probeRaft(ctx, closing.Addr().String(), nil)
	require.Equal(t, Refused, got, why)

	// A TLS port of one CA; the client holds a certificate of another.
	dir, other := t.TempDir(), t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, time.Hour))
	require.NoError(t, mtls.GenerateDevCA(other, []mtls.Cert{{Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	server, err := mtls.FilesFor(dir, "c1").Load()
	require.NoError(t, err)
	server.ClientCAs = server.RootCAs
	server.ClientAuth = tls.RequireAndVerifyClientCert
	tl, err := tls.Listen("tcp", "127.0.0.1:0", server)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = c.Read(make([]byte, 16)) // runs the handshake, which fails
				_ = c.Close()
			}()
		}
	}()
	client, err := mtls.FilesFor(other, "w1").Load()
	require.NoError(t, err)
	client.RootCAs = server.RootCAs
	got, why = probeRaft(ctx, tl.Addr().String(), client)
	require.Equal(t, Refused, got, why)
	got, why = probeRaft(ctx, tl.Addr().String(), nil)
	require.Equal(t, Refused, got, "plaintext to a TLS port: %s", why)

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := dead.Addr().String()
	require.NoError(t, dead.Close())
	got, why = probeRaft(ctx, addr, nil)
	require.Equal(t, Inconclusive, got, why)
}

func TestJSONPayloadAndIDs(t *testing.T) {
	for _, n := range []int{12, 100, 4096} {
		p := jsonPayload(n)
		require.Len(t, p, n)
		require.True(t, slices.Equal(p[:6], []byte(`{"p":"`)))
	}
	h, err := history.Create(filepath.Join(t.TempDir(), "h.jsonl"), "hostile")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	nm, err := New(Config{Replicas: []Replica{{ID: "c1"}}, Workers: []string{"w1", "w2"}, Runs: []string{"r"}, Ghost: "g",
		TLS: func(string) (*tls.Config, error) { return nil, nil }, History: h})
	require.NoError(t, err)
	items := nm.items(3, 40)
	require.Len(t, items, 3)
	for _, it := range items {
		require.Len(t, it.GetId(), 32)
		require.Equal(t, "HOSTILE!", string(it.GetId()[:8]))
		require.Equal(t, hex.EncodeToString([]byte(IDPrefix)), hex.EncodeToString(it.GetId())[:6], "the checker traces ids by IDPrefix")
		require.Len(t, it.GetPayload(), 40)
	}
	require.NotEqual(t, items[0].GetId(), items[1].GetId())
}
