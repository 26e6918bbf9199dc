package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
)

// TestCertExpiryMetric: the gauge is the seconds left on the current
// certificate, labelled with its name and role.
func TestCertExpiryMetric(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, 48*time.Hour))
	src, err := mtls.FilesFor(dir, "c1").NewSource(mtls.SourceOptions{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	now := src.Current().Leaf.NotAfter.Add(-time.Hour)
	require.NoError(t, reg.Register(certExpiry{src: src, now: func() time.Time { return now }}))
	want := `
# HELP rollout_cert_expiry_seconds Seconds until this process's TLS certificate (as reloaded from its files) expires; negative once expired. A certificate within a tenth of its life of expiring should be renewed.
# TYPE rollout_cert_expiry_seconds gauge
rollout_cert_expiry_seconds{name="c1",role="replica"} 3600
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "rollout_cert_expiry_seconds"))
	require.NoError(t, RegisterCertExpiry(prometheus.NewRegistry(), src))
	require.NoError(t, RegisterCertExpiry(prometheus.NewRegistry(), nil))
}
