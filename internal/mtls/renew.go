package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Renewal: a node asks the cluster for a new certificate for its own
// identity with a certificate signing request (CSR) over its current
// mutual-TLS connection; a replica that holds the CA key (LoadCA) signs it
// with SignRenewal, keeping the name, role and SANs of the certificate the
// caller presented. RenewDue says when a certificate should be renewed,
// WritePairAtomic puts the new files in place.

var (
	// ErrBadCSR means a certificate signing request does not parse or its
	// signature does not verify.
	ErrBadCSR = errors.New("mtls: bad certificate signing request")
	// ErrWeakKey means a CSR's public key is of an unsupported kind or too
	// small (accepted: ECDSA P-256, P-384 or P-521, Ed25519, RSA of at
	// least 2048 bits).
	ErrWeakKey = errors.New("mtls: weak or unsupported key")
	// ErrIdentityMismatch means a CSR asks for a name or role other than
	// the caller's own.
	ErrIdentityMismatch = errors.New("mtls: a certificate may renew only its own name and role")
	// ErrCAExpired means the CA has expired (or expires before the
	// requested validity starts): it can sign nothing.
	ErrCAExpired = errors.New("mtls: the CA has expired")
	// ErrBadValidity means a validity is not positive or reaches beyond the
	// CA's own expiry.
	ErrBadValidity = errors.New("mtls: bad validity")
)

// minRSABits is the smallest RSA key a CSR may carry.
const minRSABits = 2048

// maxBackdate is how far before its signing a renewed certificate's
// NotBefore lies (for clocks that lag the signer's), at most a tenth of its
// validity.
const maxBackdate = 5 * time.Minute

// CA is a certificate authority that signs certificates: its certificate and
// private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// LoadCA reads a CA certificate (PEM) and its private key (PEM: "EC PRIVATE
// KEY" as rollout certs writes it, PKCS#1 RSA, or PKCS#8). certFile may be a
// bundle of several CAs (old and new, during a rotation): the CA is the one
// whose public key is the key's. A missing file is ErrNoCA; a file that does
// not parse, or a key that is the key of no CA certificate in certFile, is
// ErrBadPEM. Each error names the file.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%w: %s holds no key", ErrBadPEM, keyFile)
	}
	key, err := parseSigner(kb)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadPEM, keyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return nil, fmt.Errorf("%w: %s: unsupported key", ErrBadPEM, keyFile)
	}
	cas := 0
	for rest := certPEM; ; {
		var cb *pem.Block
		cb, rest = pem.Decode(rest)
		if cb == nil {
			break
		}
		if cb.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(cb.Bytes)
		if err != nil || !cert.IsCA {
			continue
		}
		cas++
		if pub.Equal(cert.PublicKey) {
			return &CA{Cert: cert, Key: key}, nil
		}
	}
	if cas == 0 {
		return nil, fmt.Errorf("%w: %s holds no CA certificate", ErrBadPEM, certFile)
	}
	return nil, fmt.Errorf("%w: %s is not the key of the CA in %s", ErrBadPEM, keyFile, certFile)
}

// parseSigner parses an EC (SEC 1), PKCS#1 RSA or PKCS#8 private key.
func parseSigner(b *pem.Block) (crypto.Signer, error) {
	switch b.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return s, nil
}

// CheckValidity returns nil when a certificate issued at now and valid for
// validFor would end no later than the CA: validFor must be positive and
// now+validFor not after the CA's NotAfter. Otherwise it is ErrBadValidity
// naming both dates.
func (ca *CA) CheckValidity(now time.Time, validFor time.Duration) error {
	if validFor <= 0 {
		return fmt.Errorf("%w: %v is not positive", ErrBadValidity, validFor)
	}
	if end := now.Add(validFor); end.After(ca.Cert.NotAfter) {
		return fmt.Errorf("%w: %v from now ends %s, after the CA's own expiry %s (%v from now)",
			ErrBadValidity, validFor, end.UTC().Format(time.RFC3339), ca.Cert.NotAfter.UTC().Format(time.RFC3339),
			ca.Cert.NotAfter.Sub(now).Truncate(time.Second))
	}
	return nil
}

// NewDevCA writes a new development CA (ca.pem and ca-key.pem, the key
// 0600) into dir, valid for validFor from now, and returns it. Existing
// files are overwritten. Certificates are then issued from it with
// IssueCerts; unlike GenerateDevCAHosts, the CA may outlive the
// certificates by far, so that short-lived certificates can be renewed
// against it.
func NewDevCA(dir string, validFor time.Duration) (*CA, error) {
	if validFor <= 0 {
		return nil, fmt.Errorf("%w: CA validity %v is not positive", ErrBadValidity, validFor)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "rollout dev CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	if err := writePair(dir, "ca", der, key); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// NewRenewalKey generates the private key of a renewed certificate (ECDSA
// P-256, as rollout certs issues).
func NewRenewalKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	return k, nil
}

// CreateCSR returns a DER certificate signing request for id signed by key:
// the Common Name is the name and the one Organizational Unit the role, as
// in the certificates rollout certs issues.
func CreateCSR(id Identity, key crypto.Signer) ([]byte, error) {
	if err := checkName(id.Name); err != nil {
		return nil, err
	}
	if _, err := ParseRole(string(id.Role)); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	return der, nil
}

// SignRenewal signs the certificate signing request csrDER (DER, PKCS#10)
// for the holder of current, the verified certificate the caller presented,
// and returns the new certificate (DER). The new certificate keeps current's
// name, role and SANs (DNS names and IP addresses; the CSR's own SANs are
// ignored), carries the CSR's public key, and is valid from now (backdated
// by at most five minutes, and at most a tenth of validFor, for lagging
// clocks) for validFor, cut at the CA's expiry.
//
// Refusals, each naming what was wrong:
//   - ErrBadCSR: the CSR does not parse or its signature does not verify;
//   - ErrWeakKey: the CSR's key is not ECDSA P-256/P-384/P-521, Ed25519 or
//     RSA of at least 2048 bits;
//   - ErrNoRole: current names no single role;
//   - ErrIdentityMismatch: the CSR's Common Name or role differs from
//     current's (a CSR must name exactly one role);
//   - ErrBadValidity: validFor is not positive;
//   - ErrCAExpired: the CA has expired at now.
func SignRenewal(ca *CA, csrDER []byte, current *x509.Certificate, validFor time.Duration, now time.Time) ([]byte, error) {
	if validFor <= 0 {
		return nil, fmt.Errorf("%w: %v is not positive", ErrBadValidity, validFor)
	}
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("%w at %s: issue a new CA (see docs/SECURITY.md)", ErrCAExpired, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: its signature does not verify: %v", ErrBadCSR, err)
	}
	if err := checkKey(csr.PublicKey); err != nil {
		return nil, err
	}
	id, err := IdentityOf(current)
	if err != nil {
		return nil, err
	}
	asked, err := IdentityOf(&x509.Certificate{Subject: csr.Subject})
	if err != nil || len(csr.Subject.OrganizationalUnit) != 1 || asked != id {
		return nil, fmt.Errorf("%w: the caller is %s, the request asks for %q with organizational units %q",
			ErrIdentityMismatch, id, csr.Subject.CommonName, csr.Subject.OrganizationalUnit)
	}
	notAfter := now.Add(validFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}},
		NotBefore:    now.Add(-min(maxBackdate, validFor/10)),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if id.Role == RoleReplica {
		// Only a replica serves; every other role is renewed for client use
		// only, without SANs (one issued before with both keeps working).
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = slices.Clone(current.DNSNames)
		tmpl.IPAddresses = slices.Clone(current.IPAddresses)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: sign: %w", err)
	}
	return der, nil
}

// checkKey refuses the public keys a renewed certificate may not carry.
func checkKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("%w: ECDSA on curve %s (use P-256, P-384 or P-521)", ErrWeakKey, k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("%w: RSA of %d bits (at least %d)", ErrWeakKey, k.N.BitLen(), minRSABits)
		}
		return nil
	}
	return fmt.Errorf("%w: %T", ErrWeakKey, pub)
}

// RenewDue returns when cert should be renewed: once less than a third of
// its life (NotAfter - NotBefore) is left.
func RenewDue(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Add(-life / 3)
}

// ReadCertFile reads the first certificate of a PEM file; a file without one
// is ErrBadPEM naming it.
func ReadCertFile(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: %s holds no certificate", ErrBadPEM, file)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadPEM, file, err)
			}
			return c, nil
		}
	}
}

// WritePairAtomic replaces certFile with the certificate certDER (PEM) and
// keyFile with key (PEM "EC PRIVATE KEY" for ECDSA, PKCS#8 otherwise), each
// by writing a temporary file in the same directory, syncing it and renaming
// it over the old one, so that a reader sees the old file or the new one,
// never a partial one. The key file is written 0600, the certificate 0644.
// The key is put in place first: a reader that loads the pair between the
// two renames finds a key that does not match the certificate (and keeps
// what it had), never a certificate whose key is not yet written.
func WritePairAtomic(certFile, keyFile string, certDER []byte, key crypto.Signer) error {
	var keyPEM []byte
	if ek, ok := key.(*ecdsa.PrivateKey); ok {
		der, err := x509.MarshalECPrivateKey(ek)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	} else {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return fmt.Errorf("mtls: %w", err)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o644)
}

// writeFileAtomic writes data to a temporary file next to file with mode
// perm, syncs it and renames it over file.
func writeFileAtomic(file string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return fmt.Errorf("mtls: write %s: %w", file, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("mtls: write %s: %w", file, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(name, file); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("mtls: write %s: %w", file, err)
	}
	return nil
}

// CheckIssue checks a batch of certificates to issue and their extra hosts
// as IssueCerts would (ErrBadName, ErrBadRole, ErrBadHost), without writing
// anything: to refuse bad input before a new CA is made.
func CheckIssue(certs []Cert, hosts []string) error {
	_, err := checkIssue(certs, hosts)
	return err
}
