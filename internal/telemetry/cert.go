package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollout/rollout/internal/mtls"
)

// certExpiryDesc is rollout_cert_expiry_seconds{name,role}.
var certExpiryDesc = prometheus.NewDesc("rollout_cert_expiry_seconds",
	"Seconds until this process's TLS certificate (as reloaded from its files) expires; negative once expired. "+
		"A certificate within a tenth of its life of expiring should be renewed.",
	[]string{"name", "role"}, nil)

// certExpiry collects the expiry of a Source's current certificate at each
// scrape, so a certificate renewed in place shows its new expiry.
type certExpiry struct {
	src *mtls.Source
	now func() time.Time
}

func (c certExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

func (c certExpiry) Collect(ch chan<- prometheus.Metric) {
	leaf := c.src.Current().Leaf
	id, _ := mtls.IdentityOf(leaf)
	ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, leaf.NotAfter.Sub(c.now()).Seconds(), id.Name, string(id.Role))
}

// RegisterCertExpiry registers rollout_cert_expiry_seconds{name,role}, the
// seconds left on src's current certificate, on reg. A nil src (no TLS)
// registers nothing.
func RegisterCertExpiry(reg prometheus.Registerer, src *mtls.Source) error {
	if src == nil || reg == nil {
		return nil
	}
	return reg.Register(certExpiry{src: src, now: time.Now})
}
