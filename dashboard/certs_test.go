package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestReplicaViewExpiringCerts: the replica's own certificate shows when it
// is expiring, not otherwise, and the expiring peers always.
func TestReplicaViewExpiringCerts(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &rolloutv1.ClusterResponse{
		Header:        &rolloutv1.ReplyHeader{ReplicaId: "c1"},
		Certificate:   &rolloutv1.CertificateInfo{Name: "c1", Role: "replica", Serial: "a1", NotAfterUnixNano: at.UnixNano(), Expiring: true},
		ExpiringPeers: []*rolloutv1.CertificateInfo{{Name: "w1", Role: "worker", Serial: "b1", NotAfterUnixNano: at.UnixNano(), Expiring: true}},
	}
	v := replicaView(c, nil, nil, false)
	require.Equal(t, []CertView{
		{Name: "c1", Role: "replica", Serial: "a1", NotAfterUnixMs: at.UnixMilli(), Own: true},
		{Name: "w1", Role: "worker", Serial: "b1", NotAfterUnixMs: at.UnixMilli()},
	}, v.ExpiringCerts)
	c.Certificate.Expiring = false
	v = replicaView(c, nil, nil, false)
	require.Len(t, v.ExpiringCerts, 1)
	require.Equal(t, "w1", v.ExpiringCerts[0].Name)
}
