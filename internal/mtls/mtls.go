// Package mtls loads the mutual-TLS configuration every rollout edge uses
// (worker↔coordinator, CLI↔coordinator, coordinator↔coordinator Raft) and
// generates a development CA with certificates for local clusters.
//
// One *tls.Config serves both ends of a connection: it presents the node's
// certificate, verifies peers' certificates against the CA whether they dial
// or are dialled, and requires a client certificate.
//
// Every rollout certificate carries an identity and a role (see Identity):
// the identity is the Common Name, the role is the one Organizational Unit
// of the subject that names a Role. The role decides what the holder may do
// (see Role); a certificate with no role, or with two, authorizes nothing.
// Roles bind servers too: every client config of this package (Files.Load,
// Source.Config) accepts only a server whose certificate carries role
// replica (ErrNotReplica), and only a replica's certificate is issued for
// server use (a gateway's HTTPS certificate aside, which is for server use
// only).
package mtls

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

var (
	// ErrIncompleteFlags means some but not all of --tls-ca, --tls-cert and
	// --tls-key were given.
	ErrIncompleteFlags = errors.New("mtls: --tls-ca, --tls-cert and --tls-key must be given together")
	// ErrBadPEM means a file held no usable PEM data.
	ErrBadPEM = errors.New("mtls: bad PEM data")
	// ErrNoPeerIdentity means a request carried no verified client certificate.
	ErrNoPeerIdentity = errors.New("mtls: no verified peer certificate")
	// ErrBadName means a certificate name is empty or unusable as a file name.
	ErrBadName = errors.New("mtls: bad certificate name")
	// ErrBadHost means an extra SAN host is neither an IP address nor a
	// DNS name.
	ErrBadHost = errors.New("mtls: bad certificate host")
	// ErrNoRole means a certificate names no rollout role (or more than
	// one); it authorizes nothing.
	ErrNoRole = errors.New("mtls: certificate carries no single rollout role")
	// ErrBadRole means a role name is not one of replica, worker, client,
	// admin, gateway, peer.
	ErrBadRole = errors.New("mtls: unknown role")
	// ErrBadClusterName means a cluster name (rollout-coord --cluster-name,
	// a peers file's name, a peer certificate's name) is not a DNS label.
	ErrBadClusterName = errors.New("mtls: bad cluster name")
	// ErrNoCA means a directory holds no CA (ca.pem and ca-key.pem) to
	// issue certificates from.
	ErrNoCA = errors.New("mtls: no CA to issue from")
)

// Role is what a certificate's holder may do. It is written in the
// certificate as an Organizational Unit of the subject.
type Role string

// The roles. A replica is a coordinator replica (the only role the Raft port
// accepts); a worker runs items, for its own id only; a client submits runs
// (as the tenant its certificate names) and reads and cancels its own; a
// gateway is a front end that authenticates its own users (the OpenAI
// gateway's API keys): what a client may, for any tenant it names; an admin
// does what a client does for every tenant, and changes membership, evicts
// workers, sets tenants' weights and quotas. A peer is another rollout
// cluster (federation, docs/FEDERATION.md): its name is the calling
// cluster's name (CheckClusterName), it is issued by the callee's CA, and it
// may act only on runs named under "NAME/", as tenant NAME.
const (
	RoleReplica Role = "replica"
	RoleWorker  Role = "worker"
	RoleClient  Role = "client"
	RoleAdmin   Role = "admin"
	RoleGateway Role = "gateway"
	RolePeer    Role = "peer"
)

// Roles lists every role, in a fixed order.
func Roles() []Role {
	return []Role{RoleReplica, RoleWorker, RoleClient, RoleAdmin, RoleGateway, RolePeer}
}

// ParseRole returns the Role named s, or ErrBadRole.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w %q (the roles are replica, worker, client, admin, gateway, peer)", ErrBadRole, s)
}

// Identity is who a verified certificate names: its Common Name and role.
type Identity struct {
	Name string
	Role Role
}

// String is "name (role)".
func (id Identity) String() string { return fmt.Sprintf("%s (%s)", id.Name, id.Role) }

// IdentityOf returns the identity a certificate carries. A certificate with
// no Organizational Unit naming a role, or with two different roles, is
// ErrNoRole (the returned Identity still has the Name).
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	id := Identity{Name: cert.Subject.CommonName}
	for _, ou := range cert.Subject.OrganizationalUnit {
		r, err := ParseRole(ou)
		if err != nil {
			continue
		}
		if id.Role != "" && id.Role != r {
			return Identity{Name: id.Name}, fmt.Errorf("%w: %q names both %s and %s", ErrNoRole, id.Name, id.Role, r)
		}
		id.Role = r
	}
	if id.Role == "" {
		return id, fmt.Errorf("%w: %q (issue it with rollout certs)", ErrNoRole, id.Name)
	}
	return id, nil
}

// Cert names one certificate to issue: its identity and role.
type Cert struct {
	Name string
	Role Role
}

// ParseCert parses "NAME:ROLE" (for example "w1:worker").
func ParseCert(s string) (Cert, error) {
	name, role, ok := strings.Cut(s, ":")
	if !ok {
		return Cert{}, fmt.Errorf("%w: %q has no role: write NAME:ROLE, ROLE one of replica, worker, client, admin, gateway, peer", ErrBadRole, s)
	}
	r, err := ParseRole(role)
	if err != nil {
		return Cert{}, err
	}
	if err := checkCertName(name, r); err != nil {
		return Cert{}, err
	}
	return Cert{Name: name, Role: r}, nil
}

// checkName refuses names that cannot be a certificate identity and a file
// name.
func checkName(n string) error {
	if n == "" || n == "ca" || filepath.Base(n) != n || strings.ContainsAny(n, ": \t\r\n") || len(n) > 128 {
		return fmt.Errorf("%w: %q", ErrBadName, n)
	}
	return nil
}

// checkCertName is checkName, and for role peer CheckClusterName too (a
// peer certificate names the calling cluster); a bad peer name is both
// ErrBadName and ErrBadClusterName.
func checkCertName(n string, r Role) error {
	if err := checkName(n); err != nil {
		return err
	}
	if r != RolePeer {
		return nil
	}
	if err := CheckClusterName(n); err != nil {
		return fmt.Errorf("%w: a peer certificate is named after the calling cluster: %w", ErrBadName, err)
	}
	return nil
}

// MaxClusterNameLen is the longest cluster name (a DNS label's limit).
const MaxClusterNameLen = 63

// CheckClusterName returns nil when name is a valid cluster name, else
// ErrBadClusterName naming the rule broken. A cluster name is a DNS label:
// 1 to 63 characters among a-z, 0-9 and '-', starting and ending with a
// letter or digit. It names a cluster (rollout-coord --cluster-name, a
// peers file's name), a peer certificate, and the prefix "NAME/" of the
// runs that cluster creates on a peer.
func CheckClusterName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty (want a DNS label: a-z, 0-9 and '-', 1 to %d characters)", ErrBadClusterName, MaxClusterNameLen)
	}
	if len(name) > MaxClusterNameLen {
		return fmt.Errorf("%w: %q has %d characters (at most %d)", ErrBadClusterName, name, len(name), MaxClusterNameLen)
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1:
		case c == '-':
			return fmt.Errorf("%w: %q starts or ends with '-'", ErrBadClusterName, name)
		default:
			return fmt.Errorf("%w: %q holds %q at byte %d (want a-z, 0-9 and '-' only)", ErrBadClusterName, name, c, i)
		}
	}
	return nil
}

// Files names the PEM files of one node.
type Files struct {
	CA, Cert, Key string
}

// AddFlags registers --tls-ca, --tls-cert and --tls-key on fs.
func (f *Files) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.CA, "tls-ca", "", "PEM file of the CA that signs every rollout certificate (enables mutual TLS)")
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM certificate of this node")
	fs.StringVar(&f.Key, "tls-key", "", "PEM private key of this node")
}

// Args returns the command-line flags that hand the files to a rollout
// binary (the ones AddFlags registers), or --insecure when none is set:
// every binary refuses plaintext without it.
func (f Files) Args() []string {
	if !f.Enabled() {
		return []string{"--insecure"}
	}
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Load returns the mutual-TLS config for the files, or nil when none is set
// (plaintext). Some but not all set is ErrIncompleteFlags. As a client the
// config accepts only a server whose certificate carries role replica
// (ErrNotReplica): rollout's only servers of mutual TLS are its replicas.
func (f Files) Load() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, ErrIncompleteFlags
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("mtls: read --tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: --tls-ca %s holds no certificate", ErrBadPEM, f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: load --tls-cert/--tls-key: %w", err)
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// As a client, the server must be a replica (ErrNotReplica); as a
		// server, the per-handshake config has no such check.
		VerifyConnection:   verifyReplicaServer,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return server, nil },
	}, nil
}

// PeerIdentity returns the identity of the verified client certificate of
// the gRPC request in ctx: ErrNoPeerIdentity when the request carries none
// (plaintext), ErrNoRole when the certificate names no role.
func PeerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, ErrNoPeerIdentity
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, ErrNoPeerIdentity
	}
	return IdentityOf(ti.State.VerifiedChains[0][0])
}

// PeerCertificate returns the verified client certificate of the gRPC
// request in ctx, or ErrNoPeerIdentity when it carries none.
func PeerCertificate(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ErrNoPeerIdentity
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil, ErrNoPeerIdentity
	}
	return ti.State.VerifiedChains[0][0], nil
}

// GenerateDevCA writes a development CA (ca.pem, ca-key.pem) and, for each
// cert, a certificate NAME.pem and key NAME-key.pem into dir. Each
// certificate has the name as Common Name and the role as Organizational
// Unit. A replica's is valid for server and client use and carries the SANs
// localhost, 127.0.0.1, ::1 and the name itself; every other role's is valid
// for client use only and carries no SAN (it serves nothing: clients of
// rollout's gRPC API accept only a replica's certificate). A gateway also
// gets an HTTPS server certificate (server use only, with the replicas'
// SANs) in NAME-https.pem and NAME-https-key.pem (HTTPSFilesFor).
// Existing files are overwritten. Keys are written 0600.
func GenerateDevCA(dir string, certs []Cert, validFor time.Duration) error {
	return GenerateDevCAHosts(dir, certs, nil, validFor)
}

// GenerateDevCAHosts is GenerateDevCA with extra SANs in every server
// certificate (replicas', gateways' HTTPS):
// each host that parses as an IP address is added as an IP SAN, any other
// as a DNS SAN (for nodes reached at addresses other than loopback). An
// empty host, or one with a port, is ErrBadHost; nothing is written then.
func GenerateDevCAHosts(dir string, certs []Cert, hosts []string, validFor time.Duration) error {
	sans, err := checkIssue(certs, hosts)
	if err != nil {
		return err
	}
	ca, err := NewDevCA(dir, validFor)
	if err != nil {
		return err
	}
	return issue(dir, ca.Cert, ca.Key, certs, sans, validFor)
}

// HasCA reports whether dir holds a CA certificate and its key (ca.pem and
// ca-key.pem), as GenerateDevCA writes them.
func HasCA(dir string) bool {
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// IssueCerts issues certificates from the CA already in dir (ca.pem and
// ca-key.pem, as GenerateDevCA wrote them), leaving the CA and every other
// certificate in dir untouched and valid: adding a worker later needs no
// new CA. The certificates are made as GenerateDevCAHosts makes them, with
// the extra SANs hosts; none outlives the CA. A missing or unreadable CA is
// ErrNoCA, a CA file pair that does not parse ErrBadPEM; nothing is written
// then.
func IssueCerts(dir string, certs []Cert, hosts []string, validFor time.Duration) error {
	sans, err := checkIssue(certs, hosts)
	if err != nil {
		return err
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return fmt.Errorf("%w: %s holds no certificate", ErrBadPEM, filepath.Join(dir, "ca.pem"))
	}
	caCert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || !caCert.IsCA {
		return fmt.Errorf("%w: %s is not a CA certificate", ErrBadPEM, filepath.Join(dir, "ca.pem"))
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return fmt.Errorf("%w: %s holds no key", ErrBadPEM, filepath.Join(dir, "ca-key.pem"))
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadPEM, filepath.Join(dir, "ca-key.pem"), err)
	}
	if !caKey.PublicKey.Equal(caCert.PublicKey) {
		return fmt.Errorf("%w: %s is not the key of %s", ErrBadPEM, filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "ca.pem"))
	}
	return issue(dir, caCert, caKey, certs, sans, validFor)
}

// sanSet is the SANs every issued certificate carries besides its name.
type sanSet struct {
	baseIPs, extraIPs []net.IP
	baseDNS, extraDNS []string
}

// checkIssue checks the names, roles and hosts of a batch to issue and
// returns the SANs.
func checkIssue(certs []Cert, hosts []string) (sanSet, error) {
	for _, c := range certs {
		if err := checkName(c.Name); err != nil {
			return sanSet{}, err
		}
		if _, err := ParseRole(string(c.Role)); err != nil {
			return sanSet{}, fmt.Errorf("certificate %q: %w", c.Name, err)
		}
		if err := checkCertName(c.Name, c.Role); err != nil {
			return sanSet{}, err
		}
	}
	// The SANs every certificate has; extra hosts already among them (or
	// repeated) are left out.
	s := sanSet{baseIPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, baseDNS: []string{"localhost"}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(s.baseIPs, ip.Equal) && !slices.ContainsFunc(s.extraIPs, ip.Equal) {
				s.extraIPs = append(s.extraIPs, ip)
			}
			continue
		}
		if h == "" || strings.ContainsAny(h, ":/ \t\n") {
			return sanSet{}, fmt.Errorf("%w: %q (want an IP address or a DNS name, without a port)", ErrBadHost, h)
		}
		if !slices.Contains(s.baseDNS, h) && !slices.Contains(s.extraDNS, h) {
			s.extraDNS = append(s.extraDNS, h)
		}
	}
	return s, nil
}

// issue signs and writes one certificate per cert with the CA.
func issue(dir string, caCert *x509.Certificate, caKey crypto.Signer, certs []Cert, sans sanSet, validFor time.Duration) error {
	now := time.Now()
	notAfter := now.Add(validFor)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	for _, c := range certs {
		n := c.Name
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: n, OrganizationalUnit: []string{string(c.Role)}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if c.Role == RoleReplica {
			// A replica serves (gRPC, Raft) and dials its peers.
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			tmpl.DNSNames = dnsNames(n, sans.baseDNS, sans.extraDNS)
			tmpl.IPAddresses = append(slices.Clone(sans.baseIPs), sans.extraIPs...)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		if err := writePair(dir, n, der, key); err != nil {
			return err
		}
		if c.Role != RoleGateway {
			continue
		}
		// The gateway's HTTPS server certificate: server use only (it
		// authenticates nobody to the cluster), for the hosts.
		hkey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		htmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: n, OrganizationalUnit: []string{string(c.Role)}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     dnsNames(n, sans.baseDNS, sans.extraDNS),
			IPAddresses:  append(slices.Clone(sans.baseIPs), sans.extraIPs...),
		}
		hder, err := x509.CreateCertificate(rand.Reader, htmpl, caCert, &hkey.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		if err := writePair(dir, n+HTTPSSuffix, hder, hkey); err != nil {
			return err
		}
	}
	return nil
}

// HTTPSSuffix ends the name of a gateway's HTTPS server certificate files:
// for gateway NAME, NAME-https.pem and NAME-https-key.pem (HTTPSFilesFor).
const HTTPSSuffix = "-https"

// HTTPSFilesFor names the HTTPS server certificate files issued beside a
// gateway's certificate in dir.
func HTTPSFilesFor(dir, name string) Files { return FilesFor(dir, name+HTTPSSuffix) }

// dnsNames returns the DNS SANs of the certificate of name: base, name
// itself and extra, each once.
func dnsNames(name string, base, extra []string) []string {
	out := slices.Clone(base)
	for _, h := range append([]string{name}, extra...) {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// FilesFor names the files GenerateDevCA wrote for name in dir.
func FilesFor(dir, name string) Files {
	return Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+"-key.pem"),
	}
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), certPEM, 0o644); err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), keyPEM, 0o600); err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
