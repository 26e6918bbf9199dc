package runner

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
)

// certValidity is how long the certificates the certs nemesis issues are
// valid (the dev CA lives a day).
const certValidity = 12 * time.Hour

// reloadWait bounds how long the certs nemesis waits for each process to
// log that it reloaded its TLS files after a SIGHUP. A process that is
// paused (or killed) by another nemesis does not log in time: the nemesis
// goes on (a paused one reloads when it resumes, its SIGHUP pending; a
// killed one reads the files when it restarts) and says so in its detail.
const reloadWait = 20 * time.Second

// certifier is the harness's nemesis.Certifier: it renews certificates in
// the dev CA's directory (the files every process reads), rotates the CA
// by the steps of docs/SECURITY.md, and revokes workers as the "admin"
// identity. The harness's own clients reload their files at each
// handshake; the certifier reloads them too at each step, as a SIGHUP
// reloads the processes.
type certifier struct {
	h *harness

	mu        sync.Mutex
	rotations int
	revoked   map[string]bool
}

var _ nemesis.Certifier = (*certifier)(nil)

// tlsConfig returns the harness's client TLS configuration of identity,
// read from the files at each handshake when they changed (so that it
// follows renewals and CA rotations), or nil without TLS. An identity
// without a certificate is localcluster.ErrNoIdentity.
func (h *harness) tlsConfig(identity string) (*tls.Config, error) {
	if _, err := h.c.TLSConfig(identity); err != nil || !h.c.TLSEnabled() {
		return nil, err
	}
	conf, src, err := mtls.FilesFor(h.c.TLSDir(), identity).LoadReloading(mtls.SourceOptions{})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.sources = append(h.sources, src)
	h.mu.Unlock()
	return conf, nil
}

// reloadClients reloads the TLS files of every client the harness made.
func (h *harness) reloadClients() {
	h.mu.Lock()
	srcs := slices.Clone(h.sources)
	h.mu.Unlock()
	for _, s := range srcs {
		_ = s.Reload()
	}
}

// revokedWorker reports whether the certs nemesis revoked worker id.
func (h *harness) revokedWorker(id string) bool {
	if h.certs == nil {
		return false
	}
	h.certs.mu.Lock()
	defer h.certs.mu.Unlock()
	return h.certs.revoked[id]
}

// Cert applies one certificate step.
func (k *certifier) Cert(ctx context.Context, s nemesis.Step) (string, func(context.Context) error, error) {
	if !k.h.c.TLSEnabled() {
		return "", nil, fmt.Errorf("%w: the certs nemesis needs mutual TLS", ErrInvalidConfig)
	}
	switch s.Cert {
	case nemesis.CertRenew:
		d, err := k.renew(ctx, s.Target)
		return d, nil, err
	case nemesis.CertRotateCA:
		return k.rotate(ctx)
	case nemesis.CertRevoke:
		d, err := k.revoke(ctx, s.Target)
		return d, func(hctx context.Context) error { k.probe(hctx, s.Target); return nil }, err
	}
	return "", nil, fmt.Errorf("%w: certificate fault %q", ErrInvalidConfig, s.Cert)
}

// procs returns the processes of the cluster: replicas, then workers.
func (k *certifier) procs() []*localcluster.Proc {
	var out []*localcluster.Proc
	for _, r := range k.h.c.Replicas {
		out = append(out, r.Proc)
	}
	for _, w := range k.h.c.Workers() {
		out = append(out, w.Proc)
	}
	return out
}

// renew gives node a new key and certificate of its name, role and SANs
// from the CA, in place (key file first), and SIGHUPs it.
func (k *certifier) renew(ctx context.Context, node string) (string, error) {
	dir := k.h.c.TLSDir()
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return "", err
	}
	serial, err := reissue(ca, dir, node)
	if err != nil {
		return "", err
	}
	var p *localcluster.Proc
	for _, q := range k.procs() {
		if q.Name == node {
			p = q
		}
	}
	if p == nil {
		return "", fmt.Errorf("%w: no process %q", ErrHarness, node)
	}
	detail := fmt.Sprintf("%s renewed in place: serial %s", node, serial)
	late := k.hup(ctx, []*localcluster.Proc{p}, func(l string) bool { return strings.Contains(l, "serial="+serial) })
	return detail + late, nil
}

// reissue signs a new certificate for name's current one (same name, role
// and SANs, a new key) with ca and writes the pair in dir, key first. It
// returns the new serial.
func reissue(ca *mtls.CA, dir, name string) (string, error) {
	f := mtls.FilesFor(dir, name)
	cur, err := mtls.ReadCertFile(f.Cert)
	if err != nil {
		return "", err
	}
	id, err := mtls.IdentityOf(cur)
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.Cert, err)
	}
	key, err := mtls.NewRenewalKey()
	if err != nil {
		return "", err
	}
	csr, err := mtls.CreateCSR(id, key)
	if err != nil {
		return "", err
	}
	der, err := mtls.SignRenewal(ca, csr, cur, certValidity, time.Now())
	if err != nil {
		return "", fmt.Errorf("renewing %s: %w", name, err)
	}
	if err := mtls.WritePairAtomic(f.Cert, f.Key, der, key); err != nil {
		return "", err
	}
	c, err := mtls.ReadCertFile(f.Cert)
	if err != nil {
		return "", err
	}
	return mtls.SerialOf(c), nil
}

// rotate runs the first steps of a CA rotation: a new CA, a bundle of both
// CAs in every process (reload), a certificate of the new CA for every
// identity (reload). The returned heal runs the last: only the new CA in
// the bundle (reload).
func (k *certifier) rotate(ctx context.Context) (string, func(context.Context) error, error) {
	k.mu.Lock()
	k.rotations++
	n := k.rotations
	k.mu.Unlock()
	dir := k.h.c.TLSDir()
	newDir := filepath.Join(filepath.Dir(dir), fmt.Sprintf("tls-ca-%d", n))
	ca, err := mtls.NewDevCA(newDir, 24*time.Hour)
	if err != nil {
		return "", nil, err
	}
	oldCA, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	newCA, err := os.ReadFile(filepath.Join(newDir, "ca.pem"))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	// 1-2. Both CAs in the bundle; every process reloads.
	if err := writeAtomic(filepath.Join(dir, "ca.pem"), append(append(oldCA, '\n'), newCA...), 0o644); err != nil {
		return "", nil, err
	}
	var notes []string
	notes = append(notes, strings.TrimPrefix(k.hup(ctx, k.procs(), func(l string) bool { return strings.Contains(l, "cas=2") }), "; "))
	// 3. A certificate of the new CA for every identity, key first.
	names, err := identities(dir)
	if err != nil {
		return "", nil, err
	}
	serials := map[string]string{}
	for _, name := range names {
		sn, err := reissue(ca, dir, name)
		if err != nil {
			return "", nil, err
		}
		serials[name] = sn
	}
	// The CA key the next renewals sign with.
	caKey, err := os.ReadFile(filepath.Join(newDir, "ca-key.pem"))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	if err := writeAtomic(filepath.Join(dir, "ca-key.pem"), caKey, 0o600); err != nil {
		return "", nil, err
	}
	// 4. Every process reloads its new certificate.
	procs := k.procs()
	late := k.hupEach(ctx, procs, func(p *localcluster.Proc) func(string) bool {
		sn := serials[p.Name]
		return func(l string) bool { return sn != "" && strings.Contains(l, "serial="+sn) }
	})
	notes = append(notes, strings.TrimPrefix(late, "; "))
	detail := fmt.Sprintf("new CA (serial %s) beside the old one in every bundle; %d certificates of the new CA in place", mtls.SerialOf(ca.Cert), len(names))
	for _, n := range notes {
		if n != "" {
			detail += "; " + n
		}
	}
	heal := func(hctx context.Context) error {
		// 5. Only the new CA in the bundle; every process reloads.
		if err := writeAtomic(filepath.Join(dir, "ca.pem"), newCA, 0o644); err != nil {
			return err
		}
		if late := k.hup(hctx, k.procs(), func(l string) bool { return strings.Contains(l, "cas=1") }); late != "" {
			k.h.note("certs nemesis: dropping the old CA%s", late)
		}
		return nil
	}
	return detail, heal, nil
}

// identities names the certificates in the dev CA's directory (NAME.pem
// with a NAME-key.pem; not the CA's).
func identities(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pem")
		if !ok || name == "ca" || strings.HasSuffix(name, "-key") || strings.HasPrefix(name, ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name+"-key.pem")); err == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// revoke revokes worker's certificate (by name) as the admin identity and
// returns once the ledger committed it: RevokeCertificate answered OK, or
// AlreadyExists to a retry of this call.
func (k *certifier) revoke(ctx context.Context, worker string) (string, error) {
	conf, err := k.h.tlsConfig("admin")
	if err != nil {
		return "", fmt.Errorf("%w: the admin certificate: %v", ErrHarness, err)
	}
	cc := coordclient.DefaultConfig()
	cc.TLS = conf
	cc.Addrs = k.h.c.GRPCAddrs()
	cc.CallTimeout = 3 * time.Second
	cc.RetryMin, cc.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	cl, err := coordclient.New(cc)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrHarness, err)
	}
	defer cl.Close()
	// Marked first: from the call on, the worker may be cut off.
	k.mu.Lock()
	if k.revoked == nil {
		k.revoked = map[string]bool{}
	}
	k.revoked[worker] = true
	k.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := &rolloutv1.RevokeCertificateRequest{Name: worker, Reason: "jepsen-lite certs nemesis"}
	for {
		resp, err := cl.RevokeCertificate(rctx, req)
		if err == nil {
			return fmt.Sprintf("worker %s's certificate revoked by name; %d of its items re-pended", worker, resp.GetRepended()), nil
		}
		if status.Code(err) == codes.AlreadyExists {
			// Nothing else revokes in a run: a retry of this call (here or
			// in the client) found its own revocation committed.
			return fmt.Sprintf("worker %s's certificate revoked by name (a retry found it revoked)", worker), nil
		}
		if rctx.Err() != nil {
			return "", fmt.Errorf("revoking worker %s: %w", worker, err)
		}
		select {
		case <-rctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probeWait bounds each call of the probe as a revoked worker.
const probeWait = 3 * time.Second

// probe calls Register and Claim as the revoked worker, with its
// certificate, after the revocation's event is in the history (at the
// heal): writes the revoked-refused checker judges whatever the worker
// process itself tried. It notes what the cluster answered.
func (k *certifier) probe(ctx context.Context, worker string) {
	cl, err := k.h.clientAs("revoked-"+worker, worker)
	if err != nil {
		k.h.note("certs nemesis: no probe as revoked worker %s: %v", worker, err)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, probeWait)
	_, rerr := cl.Register(rctx, worker)
	cancel()
	cctx, cancel := context.WithTimeout(ctx, probeWait)
	resp, cerr := cl.Claim(cctx, worker, 1, 0)
	cancel()
	answer := func(err error) string {
		if err == nil {
			return "ACCEPTED"
		}
		msg := err.Error()
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		return "refused (" + msg + ")"
	}
	claim := answer(cerr)
	if cerr == nil && len(resp.GetItems()) == 0 {
		claim = "answered with no item"
	}
	k.h.note("certs nemesis: as revoked worker %s after its revocation: Register %s, Claim %s", worker, answer(rerr), claim)
}

// hup SIGHUPs procs (and reloads the harness's clients), then waits for
// each running one to log a TLS reload line that matches; it returns "" or
// "; " and the processes that did not within reloadWait.
func (k *certifier) hup(ctx context.Context, procs []*localcluster.Proc, match func(string) bool) string {
	return k.hupEach(ctx, procs, func(*localcluster.Proc) func(string) bool { return match })
}

// hupEach is hup with a match per process.
func (k *certifier) hupEach(ctx context.Context, procs []*localcluster.Proc, match func(*localcluster.Proc) func(string) bool) string {
	type waiting struct {
		p     *localcluster.Proc
		from  int64
		match func(string) bool
	}
	var ws []waiting
	for _, p := range procs {
		if !p.Running() {
			continue // it reads the files when it restarts
		}
		from := int64(0)
		if st, err := os.Stat(p.LogPath); err == nil {
			from = st.Size()
		}
		if err := p.Signal(syscall.SIGHUP); err != nil {
			continue
		}
		ws = append(ws, waiting{p, from, match(p)})
	}
	k.h.reloadClients()
	var mu sync.Mutex
	var late []string
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, reloadWait)
			defer cancel()
			for !reloadLogged(w.p.LogPath, w.from, w.match) {
				select {
				case <-wctx.Done():
					mu.Lock()
					late = append(late, w.p.Name)
					mu.Unlock()
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	if len(late) == 0 {
		return ""
	}
	slices.Sort(late)
	return fmt.Sprintf("; no reload logged within %v by %s (paused, killed or restarted: it reads the files when it runs again)", reloadWait, strings.Join(late, ", "))
}

// reloadLogged reports whether the log at path holds, from offset from on,
// a "TLS files reloaded" line that matches.
func reloadLogged(path string, from int64, match func(string) bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "TLS files reloaded") && match(l) {
			return true
		}
	}
	return false
}

// writeAtomic replaces file with data through a temporary file and a
// rename, so that a process reads the old file or the new one.
func writeAtomic(file string, data []byte, perm os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	return nil
}

// impostorCert is the hostile nemesis' Config.Impostor: a certificate from
// the cluster's current CA (the dev CA in its directory) in the name of an
// insider, cycling through roles worker, client and gateway, valid for
// server use and the loopback addresses, as rollout certs issued every
// role before roles decided usages: the strongest certificate an impostor
// coordinator could hold short of a replica's.
func (h *harness) impostorCert() (tls.Certificate, string, error) {
	dir := h.c.TLSDir()
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return tls.Certificate{}, "", err
	}
	h.mu.Lock()
	h.impostors++
	n := h.impostors
	h.mu.Unlock()
	roles := []mtls.Role{mtls.RoleWorker, mtls.RoleClient, mtls.RoleGateway}
	id := mtls.Identity{Name: fmt.Sprintf("insider%d", n), Role: roles[n%len(roles)]}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost", id.Name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, id.String(), nil
}
