package charttest

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The custom resources the chart renders have no type in k8s.io/api. These
// are the fields of their upstream v1 APIs that the chart may use (cert-manager's
// certmanager/v1 Certificate, the Prometheus operator's monitoring/v1
// ServiceMonitor), with the same JSON names: decoding is as strict as for
// the built-in kinds, over this subset (a field the upstream API has but
// this subset lacks is refused too, so add it here when the chart needs it).

// Certificate is cert-manager.io/v1 Certificate.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the subset of cert-manager's CertificateSpec.
type CertificateSpec struct {
	SecretName  string               `json:"secretName"`
	CommonName  string               `json:"commonName,omitempty"`
	Subject     *CertificateSubject  `json:"subject,omitempty"`
	Duration    *metav1.Duration     `json:"duration,omitempty"`
	RenewBefore *metav1.Duration     `json:"renewBefore,omitempty"`
	PrivateKey  *CertificatePrivKey  `json:"privateKey,omitempty"`
	Usages      []string             `json:"usages,omitempty"`
	DNSNames    []string             `json:"dnsNames,omitempty"`
	IPAddresses []string             `json:"ipAddresses,omitempty"`
	IssuerRef   CertificateIssuerRef `json:"issuerRef"`
}

// CertificateSubject is cert-manager's X509Subject (the fields used).
type CertificateSubject struct {
	Organizations       []string `json:"organizations,omitempty"`
	OrganizationalUnits []string `json:"organizationalUnits,omitempty"`
}

// CertificatePrivKey is cert-manager's CertificatePrivateKey.
type CertificatePrivKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

// CertificateIssuerRef is cert-manager's ObjectReference to an issuer.
type CertificateIssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// ServiceMonitor is monitoring.coreos.com/v1 ServiceMonitor.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec is the subset of the operator's ServiceMonitorSpec.
type ServiceMonitorSpec struct {
	Selector          metav1.LabelSelector     `json:"selector"`
	NamespaceSelector *NamespaceSelector       `json:"namespaceSelector,omitempty"`
	Endpoints         []ServiceMonitorEndpoint `json:"endpoints"`
}

// NamespaceSelector is the operator's NamespaceSelector.
type NamespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

// ServiceMonitorEndpoint is the operator's Endpoint (the fields used).
type ServiceMonitorEndpoint struct {
	Port     string `json:"port,omitempty"`
	Path     string `json:"path,omitempty"`
	Scheme   string `json:"scheme,omitempty"`
	Interval string `json:"interval,omitempty"`
}
