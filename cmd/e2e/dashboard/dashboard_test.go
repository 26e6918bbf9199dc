// Package dashboarde2e tests the coordinators' web dashboards end to end:
// real rollout-coord, rollout-worker and rollout processes
// (client/localcluster), a real browser (headless Chromium driven over the
// DevTools protocol with chromedp) and `rollout demo`.
package dashboarde2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/dashboard"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/testbin"
)

// binDir is where TestMain built the binaries.
var binDir string

func TestMain(m *testing.M) { os.Exit(testbin.RunTestsWithBinaries(m, &binDir)) }

// cli runs the rollout CLI against the cluster as the identity "cli".
func cli(t *testing.T, c *localcluster.Cluster, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{args[0], "--coord", c.CoordFlag()}, c.TLSArgs("cli")...)
	full = append(full, args[1:]...)
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), full...).CombinedOutput()
	return string(out), err
}

// writeInput writes a JSONL input of n prompts.
func writeInput(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"prompt\": \"dashboard prompt %d\"}\n", i)
	}
	path := filepath.Join(t.TempDir(), "input.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// chromiumNames are the executables tried, in order.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

// findChromium returns the browser's path. Without one the test skips,
// saying why, except under CI=true, where it fails: CI installs Chromium
// (make tools-browser).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("no Chromium found (tried %s): install it with `make tools-browser` (apt-get install -y chromium)", strings.Join(chromiumNames, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true requires the browser test: " + msg)
	}
	t.Skip("environment: " + msg)
	return ""
}

// artifactsDir is where the test keeps its screenshot:
// $ROLLOUT_TEST_ARTIFACTS when set, else a temporary directory.
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("ROLLOUT_TEST_ARTIFACTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// spkiHashes returns the base64 SHA-256 of each replica certificate's
// public key, for Chromium's --ignore-certificate-errors-spki-list: the
// browser then trusts exactly these certificates of the cluster's dev CA
// and nothing else.
func spkiHashes(t *testing.T, c *localcluster.Cluster) string {
	t.Helper()
	var out []string
	for _, r := range c.Replicas {
		b, err := os.ReadFile(mtls.FilesFor(c.TLSDir(), r.ID).Cert)
		require.NoError(t, err)
		blk, _ := pem.Decode(b)
		require.NotNil(t, blk, "certificate of %s", r.ID)
		cert, err := x509.ParseCertificate(blk.Bytes)
		require.NoError(t, err)
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		out = append(out, base64.StdEncoding.EncodeToString(sum[:]))
	}
	return strings.Join(out, ",")
}

// pageView is what the dashboard page shows, read from its DOM.
type pageView struct {
	Ready   string `json:"ready"`
	Marker  string `json:"marker"`
	Replica string `json:"replica"`
	Leader  string `json:"leader"`
	Term    string `json:"term"`
	Workers string `json:"workers"`
	Done    string `json:"done"`
	Total   string `json:"total"`
	State   string `json:"state"`
	Rows    int    `json:"rows"`
	Members int    `json:"members"`
	Navs    int    `json:"navs"`
	Updated string `json:"updated"`
	Banner  string `json:"banner"`
	// Roles are the replica set's role column by replica id.
	Roles map[string]string `json:"roles"`
}

const readPage = `(() => {
  const q = (s) => { const e = document.querySelector(s); return e ? e.textContent.trim() : ""; };
  const run = '[data-run="%s"] ';
  return {
    ready: document.body.dataset.ready || "", marker: window.__rolloutTestMarker || "",
    replica: q("#replica-id"), leader: q("#leader-id"), term: q("#term"), workers: q("#worker-count"),
    done: q(run + '[data-field="done"]'), total: q(run + '[data-field="total"]'), state: q(run + '[data-field="state"]'),
    rows: document.querySelectorAll("#workers tbody tr").length,
    members: document.querySelectorAll("#members tbody tr").length,
    navs: performance.getEntriesByType("navigation").length,
    updated: q("#updated"), banner: document.getElementById("banner").hidden ? "" : q("#banner"),
    roles: Object.fromEntries([...document.querySelectorAll("#members tbody tr")].map(
      (tr) => [tr.dataset.member, tr.querySelector('[data-field="role"]').textContent])),
  };
})()`

// statusView is what `rollout status --run RUN` printed.
type statusView struct {
	leader, term, done, total string
	workers                   int
}

var (
	statusLeaderRe = regexp.MustCompile(`(?m)^leader (\S+), term (\d+)$`)
	workerRowRe    = regexp.MustCompile(`(?m)^w\d+\s`)
)

// parseStatus reads the leader, term, the run's DONE and TOTAL and the
// number of workers from `rollout status` output.
func parseStatus(t *testing.T, out, run string) statusView {
	t.Helper()
	m := statusLeaderRe.FindStringSubmatch(out)
	require.NotNil(t, m, "no leader line in:\n%s", out)
	v := statusView{leader: m[1], term: m[2], workers: len(workerRowRe.FindAllString(out, -1))}
	var header []string
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no %s column in the header %v of:\n%s", name, header, out)
		return -1
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "RUN" {
			// Columns: RUN [TENANT PRI SHARE] TOTAL PENDING RUNNING (ON TIME
			// LONG OWNER LOST) DONE ...: the two-word headers are one
			// column each.
			line = strings.NewReplacer("(ON TIME", "(ON_TIME", "OWNER LOST)", "OWNER_LOST)").Replace(line)
			header = strings.Fields(line)
		}
		if len(f) > 0 && f[0] == run && header != nil {
			v.total = f[col("TOTAL")]
			v.done = f[col("DONE")]
		}
	}
	require.NotEmpty(t, v.done, "no row for run %s in:\n%s", run, out)
	return v
}

// TestDashboardBrowser loads a follower's dashboard in headless Chromium
// during a real 3-replica run over mutual TLS (HTTPS with the replica's
// certificate), kills the leader part-way, and checks, without reloading
// the page, that it follows the run to the end and the new leader, and
// that its numbers equal `rollout status`: done/total, leader, term, and
// the worker count. The screenshot is kept in $ROLLOUT_TEST_ARTIFACTS (or
// a temporary directory).
func TestDashboardBrowser(t *testing.T) {
	chromium := findChromium(t)
	const run, items, nWorkers = "dash", 600, 3

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, TLS: true, Dashboards: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(3000))
			}
		}
		c.Stop()
	})
	for _, r := range c.Replicas {
		require.True(t, strings.HasPrefix(r.DashboardURL(), "https://127.0.0.1:"), r.DashboardURL())
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spkiHashes(t, c)),
		chromedp.WindowSize(1400, 1100),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	// Any script exception on any tab fails the test.
	var mu sync.Mutex
	var jsErrors []string
	onEvent := func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			jsErrors = append(jsErrors, fmt.Sprintf("%s (%s:%d)", e.ExceptionDetails.Text, e.ExceptionDetails.URL, e.ExceptionDetails.LineNumber+1))
			mu.Unlock()
		}
	}
	browser, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithListener(onEvent))
	defer bcancel()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, jsErrors, "a dashboard page threw")
	}()

	// One tab per replica's dashboard, each loaded once: whichever replica
	// leads when the leader is killed, a survivor's tab shows the rest.
	tabs := map[string]context.Context{}
	for i, r := range c.Replicas {
		tab := browser
		if i > 0 {
			var tcancel context.CancelFunc
			tab, tcancel = chromedp.NewContext(browser, chromedp.WithListener(onEvent))
			defer tcancel()
		}
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(r.DashboardURL())))
		_, err = chromedp.Run(tab, chromedp.Evaluate[string](`window.__rolloutTestMarker = "loaded-once"`))
		require.NoError(t, err)
		tabs[r.ID] = tab
	}

	var view pageView
	read := func(id string) pageView {
		t.Helper()
		v, err := chromedp.Run(tabs[id], chromedp.Evaluate[pageView](fmt.Sprintf(readPage, run)))
		require.NoError(t, err)
		return v
	}
	// waitPage polls replica id's tab (never reloading it) until cond holds.
	waitPage := func(id, what string, timeout time.Duration, cond func(v pageView) bool) bool {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			view = read(id)
			if cond(view) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	mustWait := func(id, what string, timeout time.Duration, cond func(v pageView) bool) {
		t.Helper()
		if !waitPage(id, what, timeout, cond) {
			t.Fatalf("%s's dashboard never showed %s; it shows %+v", id, what, view)
		}
	}
	for _, r := range c.Replicas {
		mustWait(r.ID, "its first data", 30*time.Second, func(v pageView) bool {
			return v.Ready == "1" && v.Replica == r.ID && v.Leader != "" && v.Leader != "none" && v.Members == 3
		})
	}

	for i := 1; i <= nWorkers; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "4", "--mock-latency", "40ms")
		require.NoError(t, err)
	}
	input := writeInput(t, items)
	out, err := cli(t, c, "submit", "--input", input, "--run", run)
	require.NoError(t, err, out)

	// The pages follow the run live; then the leader is killed and a
	// survivor's page shows the new leader and the run to its end.
	mustWait(c.Replicas[0].ID, "progress", 60*time.Second, func(v pageView) bool {
		d, _ := strconv.Atoi(v.Done)
		return v.Total == strconv.Itoa(items) && d >= items/4
	})
	leader, term0, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var page string
	for _, r := range c.Replicas {
		if r != leader {
			page = r.ID
			break
		}
	}
	require.NoError(t, leader.Kill())
	t.Logf("killed leader %s (term %d) at %s/%d done on the page; watching %s's dashboard", leader.ID, term0, view.Done, items, page)
	mustWait(page, "a new leader, and the old one unreachable", 60*time.Second, func(v pageView) bool {
		tm, _ := strconv.ParseUint(v.Term, 10, 64)
		return v.Leader != leader.ID && v.Leader != "none" && v.Leader != "" && tm > term0 &&
			v.Roles[v.Leader] == "leader" && v.Roles[leader.ID] == "unreachable"
	})
	// The killed replica's own page says it lost its replica, keeping
	// what it showed.
	mustWait(leader.ID, "that it is disconnected", 30*time.Second, func(v pageView) bool {
		return v.Updated == "disconnected" && strings.Contains(v.Banner, "cannot reach this replica") && v.Total == strconv.Itoa(items)
	})
	mustWait(page, "the finished run", 90*time.Second, func(v pageView) bool {
		return v.Done == strconv.Itoa(items) && v.State == "finished"
	})

	// The numbers equal `rollout status` (re-read while an election could
	// still move the leader or the term between the two reads).
	deadline := time.Now().Add(40 * time.Second)
	for {
		out, err := cli(t, c, "status", "--run", run)
		require.NoError(t, err, out)
		st := parseStatus(t, out, run)
		want := [5]string{st.done, st.total, st.leader, st.term, strconv.Itoa(st.workers)}
		var got [5]string
		match := waitPage(page, "rollout status's numbers", 5*time.Second, func(v pageView) bool {
			got = [5]string{v.Done, v.Total, v.Leader, v.Term, v.Workers}
			return got == want
		})
		if match {
			require.Equal(t, strconv.Itoa(items), view.Done)
			require.Equal(t, strconv.Itoa(nWorkers), view.Workers)
			require.Equal(t, nWorkers, view.Rows)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard shows done, total, leader, term, workers = %v; rollout status says %v:\n%s", got, want, out)
		}
	}
	// The page's replica lists the run's tenant (the CLI's certificate,
	// "cli") with its record from ListTenants, read through the leader
	// with the replica's certificate.
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(c.TLSDir(), "ca.pem"))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var ov dashboard.Overview
	for _, r := range c.Replicas {
		if r.ID != page {
			continue
		}
		require.Eventually(t, func() bool {
			resp, err := hc.Get(r.DashboardURL() + "api/overview")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			ov = dashboard.Overview{}
			if json.NewDecoder(resp.Body).Decode(&ov) != nil || ov.TenantsError != "" {
				return false
			}
			for _, tv := range ov.Tenants {
				if tv.Name == "cli" && tv.Known && tv.Done == items {
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "%s's dashboard tenants: %+v (error %q)", page, ov.Tenants, ov.TenantsError)
	}
	require.Equal(t, "loaded-once", view.Marker, "the page was reloaded; it must update in place")
	require.Equal(t, 1, view.Navs)

	png, err := chromedp.Run(tabs[page], chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 10_000)
	path := filepath.Join(artifactsDir(t), "dashboard.png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// TestDashboardPlainHTTP runs real replicas started --insecure with
// dashboards (plain HTTP on loopback): every replica's /api/overview is the
// leader's answer (a follower reads through the leader), the replica set is
// complete, and a write method is refused. It needs no browser.
func TestDashboardPlainHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, Dashboards: true})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	_, err = c.StartWorker("w1", "--backend", "mock")
	require.NoError(t, err)

	for _, r := range c.Replicas {
		u := r.DashboardURL()
		require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), u)
		var ov dashboard.Overview
		require.Eventually(t, func() bool {
			resp, err := http.Get(u + "api/overview")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			ov = dashboard.Overview{}
			if json.NewDecoder(resp.Body).Decode(&ov) != nil {
				return false
			}
			if !ov.Read.OK || len(ov.Workers) != 1 || len(ov.Replica.Members) != 3 {
				return false
			}
			// The answer is the leader's: the one the cluster names now
			// (a loaded machine may have moved leadership since).
			now, _, err := c.WaitLeader(ctx)
			if err != nil {
				return false
			}
			leader = now
			return ov.Read.ServedBy == leader.ID
		}, 30*time.Second, 100*time.Millisecond, "%s's dashboard: %+v (the leader is %s)", r.ID, ov, leader.ID)
		require.Equal(t, r.ID, ov.Replica.ID)
		require.True(t, ov.Replica.Insecure)
		require.Equal(t, leader.ID, ov.Read.ServedBy, "%s's data is the leader's answer", r.ID)
		require.Equal(t, "w1", ov.Workers[0].ID)

		resp, err := http.Post(u+"api/overview", "application/json", strings.NewReader("{}"))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	}
}

// TestDemoDashboards runs `rollout demo --pause` with real binaries: it
// prints every replica's dashboard address and the dev CA, waits for Enter
// before the run (when every dashboard answers over HTTPS, trusted through
// that CA) and after it, and passes.
func TestDemoDashboards(t *testing.T) {
	input := writeInput(t, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), "demo", "--bin", binDir, "--input", input,
		"--pause", "--mock-latency", "20ms")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var out testbin.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitOut := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), what) }, 2*time.Minute, 50*time.Millisecond,
			"the demo never printed %q:\n%s", what, out.String())
	}

	waitOut("press Enter to start the run")
	urls := regexp.MustCompile(`(?m)^\s+(c\d)\s+(https://127\.0\.0\.1:\d+/)$`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, urls, 3, out.String())
	ca := regexp.MustCompile(`dev CA \((\S+ca\.pem)\)`).FindStringSubmatch(out.String())
	require.NotNil(t, ca, out.String())
	caPEM, err := os.ReadFile(ca[1])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, u := range urls {
		require.Eventually(t, func() bool {
			resp, err := client.Get(u[2] + "api/overview")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var ov dashboard.Overview
			return json.NewDecoder(resp.Body).Decode(&ov) == nil && ov.Read.OK && ov.Replica.ID == u[1]
		}, 30*time.Second, 100*time.Millisecond, "%s's dashboard at %s", u[1], u[2])
	}
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)
	waitOut("press Enter to stop it")
	require.Contains(t, out.String(), "PASS  60 items")
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)
	select {
	case err := <-exited:
		require.NoError(t, err, out.String())
	case <-ctx.Done():
		t.Fatalf("the demo did not exit after the second Enter:\n%s", out.String())
	}
}
