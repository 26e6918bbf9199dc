package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestPrintClusterWarnsOfExpiringCertificates: a replica's own certificate
// and a connected worker's, each within a tenth of its life, are listed
// once (the worker's is reported by two replicas); a fresh one is not.
func TestPrintClusterWarnsOfExpiringCertificates(t *testing.T) {
	now := time.Now()
	cert := func(name, role, serial string, life, left time.Duration) *rolloutv1.CertificateInfo {
		return &rolloutv1.CertificateInfo{Name: name, Role: role, Serial: serial,
			NotBeforeUnixNano: now.Add(left - life).UnixNano(), NotAfterUnixNano: now.Add(left).UnixNano(), Expiring: left <= life/10}
	}
	w1 := cert("w1", "worker", "b1", 30*24*time.Hour, 2*24*time.Hour)
	views := []replicaView{
		{Addr: "a:1", Resp: &rolloutv1.ClusterResponse{Header: &rolloutv1.ReplyHeader{ReplicaId: "c1"},
			Certificate: cert("c1", "replica", "a1", 30*24*time.Hour, time.Hour), ExpiringPeers: []*rolloutv1.CertificateInfo{w1}}},
		{Addr: "a:2", Resp: &rolloutv1.ClusterResponse{Header: &rolloutv1.ReplyHeader{ReplicaId: "c2"},
			Certificate: cert("c2", "replica", "a2", 30*24*time.Hour, 20*24*time.Hour), ExpiringPeers: []*rolloutv1.CertificateInfo{w1}}},
	}
	var out bytes.Buffer
	printCluster(&out, views)
	s := out.String()
	require.Contains(t, s, "certificates within a tenth of their life of expiring")
	require.Contains(t, s, "c1 (replica, serial a1, replica c1's own): expires in 1h0m0s")
	require.Contains(t, s, "w1 (worker, serial b1, connected to c1): expires in 48h0m0s")
	require.Equal(t, 1, bytes.Count(out.Bytes(), []byte("serial b1")))
	require.NotContains(t, s, "serial a2")
}
