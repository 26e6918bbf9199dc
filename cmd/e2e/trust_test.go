package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/hostile"
)

// issueImpostorCert issues, from the CA in dir, a certificate of name and
// role the way rollout certs issued every role before roles decided usages:
// for server and client use, valid for the hosts (the replicas' --hosts):
// what an insider holding a worker's, a client's or a gateway's
// certificate of the cluster's CA has. It returns its files.
func issueImpostorCert(t *testing.T, dir, name string, role mtls.Role, hosts ...string) mtls.Files {
	t.Helper()
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(role)}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost", name},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	f := mtls.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "impostor-"+name+".pem"), Key: filepath.Join(dir, "impostor-"+name+"-key.pem")}
	require.NoError(t, os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return f
}

// startImpostor serves jepsen-lite's impostor coordinator (it counts every
// call that reaches it) over TLS with files' certificate until the test ends.
func startImpostor(t *testing.T, files mtls.Files) *hostile.Impostor {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	require.NoError(t, err)
	imp, err := hostile.ServeImpostor(cert)
	require.NoError(t, err)
	t.Cleanup(imp.Stop)
	return imp
}

// lockedBuffer is an io.Writer safe for a child process and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestImpostorCoordinatorRefused: a TLS gRPC server presenting a worker's,
// a client's or a gateway's certificate of the cluster's own CA, valid for
// the replicas' hosts (as every certificate was before), is refused by the
// CLI (status, cluster, submit: nothing uploaded), by a rollout-worker
// process and by the gateway's coordinator client: no RPC reaches it, and
// each names the identity and role the server presented.
func TestImpostorCoordinatorRefused(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCAHosts(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}, {Name: "cli", Role: mtls.RoleClient},
		{Name: "w1", Role: mtls.RoleWorker}, {Name: "gateway", Role: mtls.RoleGateway}}, []string{"127.0.0.1"}, time.Hour))
	args := func(name string) []string { return mtls.FilesFor(dir, name).Args() }
	rollout := filepath.Join(binDir, "rollout")

	for _, who := range []struct {
		name string
		role mtls.Role
	}{{"w9", mtls.RoleWorker}, {"bob", mtls.RoleClient}, {"gw9", mtls.RoleGateway}} {
		t.Run(string(who.role), func(t *testing.T) {
			// Each impostor, CLI, worker and gateway is its own: the three
			// wait on refusals side by side.
			t.Parallel()
			imp := startImpostor(t, issueImpostorCert(t, dir, who.name, who.role, "127.0.0.1"))
			presented := fmt.Sprintf("presented %s (%s), not a replica certificate", who.name, who.role)

			// The CLI: status, cluster, submit.
			store := t.TempDir()
			input, _ := writeInput(t, 5)
			for _, cmdArgs := range [][]string{
				{"status", "--run", "forged"},
				{"cluster"},
				{"submit", "--input", input, "--run", "forged", "--store", "file://" + store},
			} {
				full := append(append([]string{cmdArgs[0], "--coord", imp.Addr(), "--timeout", "10s"}, args("cli")...), cmdArgs[1:]...)
				out, err := exec.Command(rollout, full...).CombinedOutput()
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, "rollout %s accepted the impostor: %s", cmdArgs[0], out)
				require.Equal(t, 1, ee.ExitCode(), "%s", out)
				require.Contains(t, string(out), presented, "rollout %s", cmdArgs[0])
				require.Contains(t, string(out), "not a coordinator replica", "rollout %s: the diagnosis", cmdArgs[0])
				require.NotContains(t, string(out), "42/42")
			}
			entries, err := os.ReadDir(store)
			require.NoError(t, err)
			require.Empty(t, entries, "submit uploaded to the store before the coordinator was checked")

			// A worker process: it logs the refusal and never reaches it.
			var wout lockedBuffer
			w := exec.Command(filepath.Join(binDir, "rollout-worker"), append([]string{"--id", "w1", "--coord", imp.Addr(), "--backend", "mock"}, args("w1")...)...)
			w.Stdout, w.Stderr = &wout, &wout
			require.NoError(t, w.Start())
			t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
			require.Eventually(t, func() bool { return strings.Contains(wout.String(), presented) }, 60*time.Second, 50*time.Millisecond,
				"the worker does not log the refusal: %s", wout.String())

			// The gateway's coordinator client: a batch is refused.
			gwDir := t.TempDir()
			keys := filepath.Join(gwDir, "keys")
			kout, err := exec.Command(rollout, "gateway", "keys", "add", "team-a", "--keys", keys).Output()
			require.NoError(t, err)
			key := strings.TrimSpace(string(kout))
			ports, err := freeport.Ports(1)
			require.NoError(t, err)
			gwAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
			var gout lockedBuffer
			gw := exec.Command(rollout, append([]string{"gateway", "--listen", gwAddr, "--coord", imp.Addr(), "--keys", keys,
				"--store", "file://" + filepath.Join(gwDir, "store"), "--timeout", "5s"}, args("gateway")...)...)
			gw.Stdout, gw.Stderr = &gout, &gout
			require.NoError(t, gw.Start())
			t.Cleanup(func() { _ = gw.Process.Kill(); _ = gw.Wait() })
			pool := x509.NewCertPool()
			ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
			require.NoError(t, err)
			require.True(t, pool.AppendCertsFromPEM(ca))
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			require.Eventually(t, func() bool {
				resp, err := hc.Get("https://" + gwAddr + "/healthz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}, 30*time.Second, 50*time.Millisecond, "the gateway never answered over HTTPS (its NAME-https.pem certificate): %s", gout.String())
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			require.NoError(t, mw.WriteField("purpose", "batch"))
			fw, err := mw.CreateFormFile("file", "input.jsonl")
			require.NoError(t, err)
			data, err := os.ReadFile(writeChatInput(t, gwDir, "input.jsonl", "imp", 3))
			require.NoError(t, err)
			_, err = fw.Write(data)
			require.NoError(t, err)
			require.NoError(t, mw.Close())
			req, _ := http.NewRequest("POST", "https://"+gwAddr+"/v1/files", &body)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			fb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode, string(fb))
			fileID := strings.Split(strings.Split(string(fb), `"id":"`)[1], `"`)[0]
			req, _ = http.NewRequest("POST", "https://"+gwAddr+"/v1/batches",
				strings.NewReader(fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, fileID)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err = hc.Do(req)
			require.NoError(t, err)
			bb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.GreaterOrEqual(t, resp.StatusCode, 500, "the gateway created a batch on the impostor: %s", bb)
			require.Eventually(t, func() bool { return strings.Contains(gout.String(), "not a replica certificate") }, 30*time.Second, 50*time.Millisecond,
				"the gateway does not log the refusal: %s", gout.String())

			require.Zero(t, imp.Calls(), "an RPC reached the impostor")
		})
	}
}

// TestReplicaRefusesAWorkerCertificateOnReload: a replica whose certificate
// files were replaced with a worker's is sent SIGHUP: it keeps serving with
// its own certificate (a client still connects and sees the replica), and
// its log has the error naming the file and the identity found.
func TestReplicaRefusesAWorkerCertificateOnReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, TLS: true, CertWorkers: 1})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(4000))
			}
		}
		c.Stop()
	})
	_, _, err = c.WaitLeader(ctx)
	require.NoError(t, err)
	r := c.Replicas[0]
	own := mtls.FilesFor(c.TLSDir(), r.ID)
	worker := mtls.FilesFor(c.TLSDir(), "w1")
	for _, p := range [][2]string{{worker.Cert, own.Cert}, {worker.Key, own.Key}} {
		b, err := os.ReadFile(p[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p[1]+".tmp", b, 0o600))
		require.NoError(t, os.Rename(p[1]+".tmp", p[1]))
	}
	require.NoError(t, r.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		tail := r.Tail(20000)
		return strings.Contains(tail, "TLS files not reloaded") && strings.Contains(tail, "is for w1 (worker)") && strings.Contains(tail, own.Cert)
	}, 30*time.Second, 50*time.Millisecond, "the replica did not log the refused reload")
	require.Contains(t, r.Tail(20000), "[ERROR]")
	require.True(t, r.Running())

	cl := clientAs(t, c, "cli")
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	resp, err := cl.Cluster(cctx, r.GRPCAddr)
	require.NoError(t, err)
	require.Equal(t, r.ID, resp.GetCertificate().GetName(), "the replica serves its own certificate")
	require.Equal(t, "replica", resp.GetCertificate().GetRole())
	require.Equal(t, r.ID, resp.GetHeader().GetReplicaId())
}

// TestRevokedWorkerAndCLIStop: a worker whose certificate is revoked exits
// non-zero within a bounded time, its output naming the revocation (who,
// why); a CLI whose certificate is revoked exits 1 naming it, instead of
// asking again until --timeout.
func TestRevokedWorkerAndCLIStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, TLS: true, CertWorkers: 1})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(4000))
			}
			for _, w := range c.Workers() {
				t.Logf("---- %s log tail ----\n%s", w.Name, w.Tail(4000))
			}
		}
		c.Stop()
	})
	w1, err := c.StartWorker("w1", "--backend", "mock", "--heartbeat", "200ms")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(w1.Tail(20000), "registered") }, 60*time.Second, 50*time.Millisecond)

	out, err := cliFlagsLast(t, c, "admin", "certs", "revoke", "w1", "--reason", "key leaked")
	require.NoError(t, err, out)
	revoked := time.Now()
	werr := w1.Wait(60 * time.Second)
	require.True(t, w1.Exited(), "the revoked worker did not exit within 60s: %v", werr)
	t.Logf("w1 exited %v after the revocation: %v", time.Since(revoked), werr)
	var ee *exec.ExitError
	require.ErrorAs(t, werr, &ee, "the revoked worker exited zero")
	require.NotZero(t, ee.ExitCode())
	tail := w1.Tail(20000)
	require.Contains(t, tail, `the certificate "w1" (role worker`)
	require.Contains(t, tail, "is revoked by admin")
	require.Contains(t, tail, `"key leaked"`)

	// The CLI's certificate, revoked by serial.
	leaf, err := mtls.ReadCertFile(mtls.FilesFor(c.TLSDir(), "cli").Cert)
	require.NoError(t, err)
	out, err = cliFlagsLast(t, c, "admin", "certs", "revoke", mtls.SerialOf(leaf), "--serial", "--reason", "laptop lost")
	require.NoError(t, err, out)
	var last string
	require.Eventually(t, func() bool {
		start := time.Now()
		out, err := cli(t, c, "status", "--run", "nothing", "--timeout", "60s")
		last = out
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "is revoked by admin") {
			return false
		}
		require.Less(t, time.Since(start), 30*time.Second, "the CLI waited instead of stopping: %s", out)
		return true
	}, 60*time.Second, 200*time.Millisecond, "the revoked CLI did not exit 1 naming its revocation: %s", last)
	require.Contains(t, last, `"laptop lost"`)
	require.NotContains(t, last, "asking again")

	// The coordinator client says it is final, with the sentinel.
	cl := clientAs(t, c, "cli")
	_, err = cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "nothing"})
	require.ErrorIs(t, err, coordclient.ErrRevoked)
	rev, ok := coordclient.RevokedOf(err)
	require.True(t, ok)
	require.Equal(t, "laptop lost", rev.Reason)
	require.Equal(t, "admin", rev.By)
}
