package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/mtls"
)

// sh runs a shell command line in dir: the rotation steps are the
// documented ones (docs/SECURITY.md, Rotating the CA), run as written.
func sh(t *testing.T, dir, line string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", line, out)
}

// caPool reads a CA bundle file into a pool.
func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b), "no CA in %s", file)
	return pool
}

// servedCert dials addr over TLS trusting only the CAs in caFile (with
// the client pair cert, key when given) and returns the leaf the server
// presented.
func servedCert(t *testing.T, addr, caFile string, pair *tls.Certificate, alpn string) *x509.Certificate {
	t.Helper()
	conf := &tls.Config{RootCAs: caPool(t, caFile), NextProtos: []string{alpn}, MinVersion: tls.VersionTLS12}
	if pair != nil {
		conf.Certificates = []tls.Certificate{*pair}
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, conf)
	require.NoError(t, err, "TLS to %s trusting only %s", addr, caFile)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// reloadedWith reports whether log holds a "TLS files reloaded" line for
// the certificate serial.
func reloadedWith(log, serial string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "TLS files reloaded") && strings.Contains(l, "serial="+serial) {
			return true
		}
	}
	return false
}

// lastReloadHas reports whether the last "TLS files reloaded" line of log
// holds s.
func lastReloadHas(log, s string) bool {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "TLS files reloaded") {
			return strings.Contains(lines[i], s)
		}
	}
	return false
}

// gatewayBatch uploads a small chat batch through the gateway, creates it
// (the gateway submits its run to the cluster) and reads it back (the
// gateway reads the run's counters from the cluster): three requests, each
// on a connection of its own from hc.
func gatewayBatch(hc *http.Client, url, key string, seq int) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return err
	}
	fw, err := mw.CreateFormFile("file", "rot.jsonl")
	if err != nil {
		return err
	}
	for i := range 2 {
		fmt.Fprintf(fw, `{"custom_id":"rot-%d-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"e2e/model","messages":[{"role":"user","content":"q %d"}]}}`+"\n", seq, i, i)
	}
	if err := mw.Close(); err != nil {
		return err
	}
	var f, b struct {
		ID string `json:"id"`
	}
	if err := doJSON(hc, http.MethodPost, url+"/files", key, mw.FormDataContentType(), &body, &f); err != nil {
		return err
	}
	create := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, f.ID)
	if err := doJSON(hc, http.MethodPost, url+"/batches", key, "application/json", strings.NewReader(create), &b); err != nil {
		return err
	}
	if b.ID == "" {
		return fmt.Errorf("POST /batches answered no id")
	}
	return doJSON(hc, http.MethodGet, url+"/batches/"+b.ID, key, "", nil, &b)
}

// doJSON makes one request and decodes its 200 answer into v.
func doJSON(hc *http.Client, method, url, key, contentType string, body io.Reader, v any) error {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, v)
}

// TestCARotationDuringRun rotates the CA of a running cluster (3 replicas,
// 3 workers, a gateway) by the steps of docs/SECURITY.md, by file
// replacement and SIGHUP, while a run goes on and a client polls the
// gateway over HTTPS: no process restarts, no gateway request fails, the
// run ends with every input line exactly once, every process then serves
// (or, for a worker, has loaded) a certificate of the new CA, and a client
// certificate of the old CA is refused.
func TestCARotationDuringRun(t *testing.T) {
	const n = 1500
	c := startCluster(t)
	tlsDir := c.TLSDir()
	root := filepath.Dir(tlsDir)
	newDir := filepath.Join(root, "tls-new")

	var workers []*localcluster.Worker
	for i := 1; i <= 3; i++ {
		w, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "2", "--mock-latency", "100ms", "--heartbeat", "200ms")
		require.NoError(t, err)
		workers = append(workers, w)
	}
	keys := filepath.Join(root, "keys")
	keyOut, err := exec.Command(filepath.Join(binDir, "rollout"), "gateway", "keys", "add", "rot", "--keys", keys).Output()
	require.NoError(t, err)
	key := strings.TrimSpace(string(keyOut))
	// The gateway authenticates to the cluster with its gateway certificate
	// and serves HTTPS with gateway-https.pem (both rotated below).
	gw := startGatewayAs(t, c, "gateway", keys, "file://"+filepath.ToSlash(filepath.Join(root, "gwstore")))
	gwURL := gw.url
	gwAddr := strings.TrimSuffix(strings.TrimPrefix(gwURL, "https://"), "/v1")

	// A client of the gateway trusts what the bundle file holds at each
	// request, and makes a new connection (a new handshake) for each.
	gwClient := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: caPool(t, filepath.Join(tlsDir, "ca.pem")), MinVersion: tls.VersionTLS12}}}
	}
	require.NoError(t, gatewayBatch(gwClient(), gwURL, key, 0))

	pids := map[string]int{}
	for _, p := range c.Procs() {
		pids[p.Name] = p.Pid()
	}
	gwPid := gw.cmd.Process.Pid

	input, lines := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "rot")
	require.NoError(t, err, out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		rc, err := runStatus(ctx, c, "rot")
		return err == nil && rc.GetDone() >= 50
	}, time.Minute, 50*time.Millisecond, "the run does not progress")

	// The gateway loop: batches made and read through the gateway (which
	// submits them to the cluster and reads them from it) until the
	// rotation is over.
	var okReqs, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for seq := 1; loopCtx.Err() == nil; seq++ {
			err := gatewayBatch(gwClient(), gwURL, key, seq)
			if err != nil {
				failed.Add(1)
				failMu.Lock()
				failures = append(failures, err.Error())
				failMu.Unlock()
			} else {
				okReqs.Add(1)
			}
			time.Sleep(50 * time.Millisecond) // pacing of the client loop, not a wait on a condition
		}
	}()

	nodes := []string{"c1", "c2", "c3", "w1", "w2", "w3", "cli", "admin", "gateway", "gateway" + mtls.HTTPSSuffix}
	names := "c1:replica,c2:replica,c3:replica,w1:worker,w2:worker,w3:worker,cli:client,admin:admin,gateway:gateway"
	// The old client pair, kept to check that it is refused at the end.
	oldCli, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "cli.pem"), filepath.Join(tlsDir, "cli-key.pem"))
	require.NoError(t, err)

	hup := func(step string) {
		t.Helper()
		for _, r := range c.Replicas {
			require.NoError(t, r.Signal(syscall.SIGHUP), "%s: SIGHUP %s", step, r.ID)
		}
		for _, w := range workers {
			require.NoError(t, w.Signal(syscall.SIGHUP), "%s: SIGHUP %s", step, w.ID)
		}
		require.NoError(t, gw.cmd.Process.Signal(syscall.SIGHUP), "%s: SIGHUP the gateway", step)
	}
	gwLog := func() string { b, _ := os.ReadFile(gw.log); return string(b) }
	rollout := filepath.Join(binDir, "rollout")

	// 1. The new CA in a directory of its own; every bundle holds both.
	sh(t, root, rollout+" certs --dir tls-new --hosts 127.0.0.1 --names "+names)
	sh(t, root, "cat tls/ca.pem tls-new/ca.pem > ca-bundle.pem && mv ca-bundle.pem tls/ca.pem")
	// 2. Reload: every process trusts either CA.
	hup("step 2")
	for _, p := range c.Procs() {
		require.Eventually(t, func() bool { return strings.Contains(p.Tail(1<<20), "cas=2") }, 30*time.Second, 50*time.Millisecond,
			"%s did not load the two-CA bundle", p.Name)
	}
	require.Eventually(t, func() bool { return strings.Contains(gwLog(), "cas=2") }, 30*time.Second, 50*time.Millisecond,
		"the gateway did not load the two-CA bundle")

	// 3. Every node's new certificate from the new CA replaces its files,
	// key first.
	sh(t, root, rollout+" certs --dir tls-new --hosts 127.0.0.1 --names "+names)
	for _, n := range nodes {
		sh(t, root, fmt.Sprintf("cp tls-new/%[1]s-key.pem tls/%[1]s-key.pem.new && mv tls/%[1]s-key.pem.new tls/%[1]s-key.pem && "+
			"cp tls-new/%[1]s.pem tls/%[1]s.pem.new && mv tls/%[1]s.pem.new tls/%[1]s.pem", n))
	}
	serial := map[string]string{}
	for _, n := range nodes {
		cert, err := mtls.ReadCertFile(filepath.Join(newDir, n+".pem"))
		require.NoError(t, err)
		serial[n] = mtls.SerialOf(cert)
	}
	// 4. Reload again; each process logs its new serial.
	hup("step 4")
	for _, r := range c.Replicas {
		require.Eventually(t, func() bool { return reloadedWith(r.Tail(1<<20), serial[r.ID]) }, 30*time.Second, 50*time.Millisecond,
			"replica %s did not load its new certificate", r.ID)
	}
	for _, w := range workers {
		require.Eventually(t, func() bool { return reloadedWith(w.Tail(1<<20), serial[w.ID]) }, 30*time.Second, 50*time.Millisecond,
			"worker %s did not load its new certificate", w.ID)
	}
	require.Eventually(t, func() bool { return reloadedWith(gwLog(), serial["gateway"]) }, 30*time.Second, 50*time.Millisecond,
		"the gateway did not load its new certificate")

	// 5. Only the new CA in every bundle; reload a last time.
	sh(t, root, "cp tls-new/ca.pem ca-bundle.pem && mv ca-bundle.pem tls/ca.pem")
	hup("step 5")
	for _, p := range c.Procs() {
		require.Eventually(t, func() bool { return lastReloadHas(p.Tail(1<<20), "cas=1") }, 30*time.Second, 50*time.Millisecond, "%s did not drop the old CA", p.Name)
	}
	require.Eventually(t, func() bool { return lastReloadHas(gwLog(), "cas=1") }, 30*time.Second, 50*time.Millisecond, "the gateway did not drop the old CA")

	// A few gateway requests after the last step, then the loop stops.
	after := okReqs.Load()
	require.Eventually(t, func() bool { return okReqs.Load() >= after+5 || failed.Load() > 0 }, 30*time.Second, 20*time.Millisecond)
	stopLoop()
	<-loopDone
	rc, err := runStatus(ctx, c, "rot")
	require.NoError(t, err)
	t.Logf("rotation done at %d/%d items; %d gateway requests, %d failed", rc.GetDone(), n, okReqs.Load()+failed.Load(), failed.Load())
	require.Less(t, rc.GetDone(), uint64(n), "the run finished before the rotation did: it proves nothing")
	failMu.Lock()
	require.Zero(t, failed.Load(), "gateway requests failed during the rotation: %v", failures)
	failMu.Unlock()

	// The run finishes with every line exactly once (a fresh client: the
	// CLI's files are the new ones now).
	waitDone(t, c, "rot", n, 2*time.Minute, nil)
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "rot", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	// Nothing restarted.
	require.Nil(t, c.Unexpected())
	for _, p := range c.Procs() {
		require.True(t, p.Running(), "%s stopped", p.Name)
		require.Equal(t, pids[p.Name], p.Pid(), "%s restarted", p.Name)
	}
	select {
	case <-gw.done:
		t.Fatal("the gateway exited")
	default:
	}
	require.Equal(t, gwPid, gw.cmd.Process.Pid)

	// Every replica and the gateway serve their new-CA certificate (the
	// dial trusts only the new CA); a client with the old CA's certificate
	// is refused by every replica.
	newCA := filepath.Join(newDir, "ca.pem")
	newCli, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "cli.pem"), filepath.Join(tlsDir, "cli-key.pem"))
	require.NoError(t, err)
	for _, r := range c.Replicas {
		got := servedCert(t, r.GRPCAddr, newCA, &newCli, "h2")
		require.Equal(t, serial[r.ID], mtls.SerialOf(got), "replica %s serves", r.ID)
		refusedOld(t, r.GRPCAddr, newCA, oldCli)
	}
	got := servedCert(t, gwAddr, newCA, nil, "h2")
	require.Equal(t, serial["gateway"+mtls.HTTPSSuffix], mtls.SerialOf(got), "the gateway serves its new HTTPS certificate")

	// The new certificates work end to end: an RPC with the new client
	// files.
	cl := clientAs(t, c, "cli")
	for _, r := range c.Replicas {
		v, err := cl.Cluster(ctx, r.GRPCAddr)
		require.NoError(t, err, "replica %s", r.ID)
		require.NotEqual(t, rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED, v.GetState())
	}
}

// refusedOld checks that the replica at addr refuses the client pair old
// (of the old CA): the handshake or the first read fails with a TLS alert
// from the server.
func refusedOld(t *testing.T, addr, caFile string, old tls.Certificate) {
	t.Helper()
	conf := &tls.Config{RootCAs: caPool(t, caFile), Certificates: []tls.Certificate{old}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err == nil {
		defer conn.Close()
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake returns; its alert comes with the first read.
		_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"))
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = conn.Read(make([]byte, 64))
	}
	require.Error(t, err, "%s accepted a certificate of the old CA", addr)
	require.Contains(t, err.Error(), "remote error: tls", "%s: the refusal is the server's TLS alert", addr)
}
