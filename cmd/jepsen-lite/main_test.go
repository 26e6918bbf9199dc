//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/hostile"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/report"
	"github.com/rollout/rollout/jepsen-lite/runner"
	"github.com/rollout/rollout/jepsen-lite/s3server"
)

// binDir holds the binaries TestMain built: rollout-coord, rollout-worker,
// rollout and jepsen-lite.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testbin.RunTestsWithBinaries(m, &binDir,
		"./cmd/rollout-coord", "./cmd/rollout-worker", "./cmd/rollout", "./cmd/jepsen-lite"))
}

// jepsen runs the jepsen-lite binary with args and returns its exit code
// and output.
func jepsen(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "jepsen-lite"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("jepsen-lite %s: %v\n%s", strings.Join(args, " "), err, out.String())
	return -1, ""
}

// noLeftovers checks that a run left no network namespace behind.
func noLeftovers(t *testing.T, out string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	list, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	require.NotContains(t, string(list), runner.Prefix(out)+"-", "namespaces left behind")
}

// requireTLS checks that the run in out was over mutual TLS: the summary
// says so, and every replica and worker whose log is named started with
// TLS (and none without), and none was refused a call (the hostile
// nemesis' calls are refused by design: with it on, only the workers'
// logs are checked for refusals).
func requireTLS(t *testing.T, out string, s report.Summary, procs ...string) {
	t.Helper()
	require.True(t, s.TLS, "the summary records mutual TLS")
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| mutual TLS | on")
	// A worker the certs nemesis revoked is refused by design.
	revoked := map[string]bool{}
	for _, f := range s.Faults {
		if f.Step.Cert == nemesis.CertRevoke && f.Err == "" {
			revoked[f.Step.Target] = true
		}
	}
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join(out, "logs", p+".log"))
		require.NoError(t, err, p)
		require.Contains(t, string(b), "--tls-cert", p)
		require.Contains(t, string(b), "tls=true", p)
		require.NotContains(t, string(b), "tls=false", p)
		if revoked[p] {
			continue
		}
		if len(s.Hostile) == 0 || strings.HasPrefix(p, "w") {
			require.NotContains(t, string(b), "PermissionDenied", p)
		}
	}
}

func verdict(t *testing.T, s report.Summary, name string) checker.Verdict {
	t.Helper()
	for _, v := range s.Verdicts {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no verdict %s in %+v", name, s.Verdicts)
	return checker.Verdict{}
}

// TestChaosShort runs every nemesis and the hostile client for 30s against
// the real binaries: every check must pass (every hostile operation
// refused), and the report must show the faults, the attacks and the
// failover times.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs a 30s chaos test of real processes")
	}
	out := filepath.Join(t.TempDir(), "report")
	code, output := jepsen(t, 5*time.Minute, "--bin", binDir, "--out", out, "--duration", "30s", "--nemesis", "all,hostile",
		"--seed", "11", "--items", "250", "--log-level", "warn")
	t.Log(output)
	require.Equal(t, exitPass, code, output)
	noLeftovers(t, out)
	s, err := report.Read(out)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	require.Contains(t, output, "mutual TLS")
	requireTLS(t, out, s, "c1", "c2", "c3", "w1", "w2", "w3", "w4")
	require.Len(t, s.Verdicts, 18, "ten checkers, the two range checkers (a range run), the input-stall checker, the flood checker, the revoked-refused checker (the certs nemesis revoked a worker), the two tenant checkers (the runs spread over tenants) and the impostor-refused checker (the hostile nemesis ran)")
	require.True(t, verdict(t, s, checker.ImpostorRefused).OK, checker.ImpostorRefused)
	for _, name := range []string{checker.TenantsFinish, checker.TenantsStarved} {
		require.True(t, verdict(t, s, name).OK, name)
	}
	for _, name := range []string{checker.RangeIndexes, checker.RangeResults} {
		v := verdict(t, s, name)
		require.Contains(t, v.Detail, "chaos-ranges-1", name)
	}
	require.Contains(t, verdict(t, s, checker.Linearizable).Detail, "indexes of range runs")
	rangeOps := map[string]int{}
	for _, o := range s.Ops {
		rangeOps[o.Op] = o.OK
	}
	require.Positive(t, rangeOps["SubmitRanges"], "the range run was submitted")
	require.Positive(t, rangeOps["ReportRange"], "workers reported ranges: %+v", s.Ops)
	for _, v := range s.Verdicts {
		require.True(t, v.OK, "%s: %s %v", v.Name, v.Detail, v.Examples)
	}
	for _, k := range append(nemesis.AllKinds(), nemesis.Hostile) {
		require.Positive(t, s.FaultCount[string(k)], "nemesis %s never ran", k)
	}
	// Every attack ran; most were answered (refused) despite the faults.
	sent, refused := map[string]int{}, 0
	for _, h := range s.Hostile {
		sent[h.Attack] += h.Sent
		refused += h.Refused
	}
	for _, a := range hostile.AllAttacks() {
		require.Positive(t, sent[string(a)], "attack %s never ran", a)
	}
	require.Greater(t, refused, len(hostile.AllAttacks())/2, "%+v", s.Hostile)
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "## Hostile client")
	require.Positive(t, s.LeaderChanges)
	kinds := map[nemesis.Kind]report.FailoverStats{}
	for _, f := range s.FailoverStats {
		kinds[f.Kind] = f
	}
	for _, k := range []nemesis.Kind{nemesis.Pause, nemesis.PartitionLeader} {
		require.Positive(t, kinds[k].N, "no failover measured for %s", k)
		require.Positive(t, kinds[k].Max)
		require.LessOrEqual(t, kinds[k].Median, kinds[k].Max)
	}
	if network.CanNetNS() == nil {
		require.Equal(t, "netns", s.Network)
	} else {
		require.Equal(t, "proxy", s.Network)
		require.Contains(t, s.NetworkNote, "fallback")
	}
	for _, f := range []string{"summary.md", "summary.json", "history.jsonl", filepath.Join("logs", "c1.log"), filepath.Join("logs", "w1.log")} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
		require.Positive(t, st.Size(), f)
	}
	var ops int
	for _, o := range s.Ops {
		ops += o.Invoked
	}
	require.Greater(t, ops, 500)
}

// TestChaosCerts runs the certs nemesis alone for 30s against the real
// binaries: certificates renewed in place, the CA rotated across every
// process (both CAs in every bundle, new certificates, the old CA dropped)
// and a worker revoked during the run. Every check passes, the
// revoked-refused checker among them with a revocation and writes by the
// revoked worker after it to judge, and the other workers finish the run.
func TestChaosCerts(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs a 30s chaos test of real processes")
	}
	out := filepath.Join(t.TempDir(), "report")
	code, output := jepsen(t, 4*time.Minute, "--bin", binDir, "--out", out, "--duration", "30s", "--nemesis", "certs",
		"--seed", "3", "--items", "250", "--log-level", "warn")
	t.Log(output)
	require.Equal(t, exitPass, code, output)
	noLeftovers(t, out)
	s, err := report.Read(out)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	requireTLS(t, out, s, "c1", "c2", "c3", "w1", "w2", "w3", "w4")
	for _, v := range s.Verdicts {
		require.True(t, v.OK, "%s: %s %v", v.Name, v.Detail, v.Examples)
	}
	applied := map[nemesis.CertFault]int{}
	revoked := ""
	for _, f := range s.Faults {
		require.Equal(t, nemesis.Certs, f.Step.Kind)
		require.Empty(t, f.Err, "%v", f)
		applied[f.Step.Cert]++
		if f.Step.Cert == nemesis.CertRevoke {
			revoked = f.Step.Target
		}
	}
	for _, c := range nemesis.CertFaults() {
		require.Positive(t, applied[c], "%s never applied: %+v", c, s.Faults)
	}
	v := verdict(t, s, checker.RevokedRefused)
	m := regexp.MustCompile(`^(\d+) revoked workers; (\d+) of their ledger writes invoked after the revocation`).FindStringSubmatch(v.Detail)
	require.NotNil(t, m, v.Detail)
	require.Equal(t, "1", m[1], v.Detail)
	writes, _ := strconv.Atoi(m[2])
	require.GreaterOrEqual(t, writes, 2, "the probe as revoked worker %s (Register, Claim) at least: the verdict is not vacuous", revoked)
	require.True(t, slices.ContainsFunc(s.Notes, func(n string) bool {
		return strings.Contains(n, "as revoked worker "+revoked+" after its revocation: Register refused")
	}), "%q", s.Notes)
	// Every process dropped the old CA at the heal: its last reload holds
	// one CA, after one with two.
	for _, p := range []string{"c1", "c2", "c3", "w1", "w2", "w3", "w4"} {
		if p == revoked {
			continue
		}
		b, err := os.ReadFile(filepath.Join(out, "logs", p+".log"))
		require.NoError(t, err, p)
		log := string(b)
		two := strings.LastIndex(log, "cas=2")
		require.Positive(t, two, "%s never loaded a two-CA bundle", p)
		require.Contains(t, log[two:], "cas=1", "%s did not drop the old CA", p)
	}
}

// TestChaosFlood runs the flood nemesis alone against the real binaries:
// the leader is flooded (connections held on its ports, a slowloris, then
// thousands of concurrent calls with a client certificate), every check
// passes, the flood checker among them, and the report has the flood's
// figures.
func TestChaosFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs a 40s chaos test of real processes")
	}
	out := filepath.Join(t.TempDir(), "report")
	code, output := jepsen(t, 3*time.Minute, "--bin", binDir, "--out", out, "--duration", "40s", "--nemesis", "flood",
		"--seed", "1", "--items", "400", "--log-level", "warn")
	t.Log(output)
	require.Equal(t, exitPass, code, output)
	s, err := report.Read(out)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	i := slices.IndexFunc(s.Verdicts, func(v checker.Verdict) bool { return v.Name == checker.FloodThroughput })
	require.GreaterOrEqual(t, i, 0, "the flood checker ran")
	v := s.Verdicts[i]
	require.True(t, v.OK, "%s %v", v.Detail, v.Examples)
	require.Contains(t, v.Detail, "no replica crashed or ran out of files")
	require.Positive(t, s.FaultCount[string(nemesis.Flood)])
	for _, f := range s.Faults {
		require.Equal(t, nemesis.Flood, f.Step.Kind)
		require.Empty(t, f.Err)
		require.Contains(t, f.Detail, "attempted", "the flood's figures are in the report")
	}
	require.True(t, slices.ContainsFunc(s.Notes, func(n string) bool { return strings.HasPrefix(n, "flood, all floods together: hold: ") }), "%q", s.Notes)
}

// TestChaosStore runs the store nemesis alone for 30s against the real
// binaries, the first run's data in a real S3 server (versitygw) and the
// second's in a file:// store: every store fault is applied (the server
// killed, paused and slowed; result objects deleted and flipped; input
// chunks damaged until the heal), every check passes, and the results the
// nemesis damaged after they were recorded are listed apart.
func TestChaosStore(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs a 30s chaos test of real processes")
	}
	gw, err := s3server.Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("environment: %v (with CI=true this fails)", err)
	}
	out := filepath.Join(t.TempDir(), "report")
	code, output := jepsen(t, 4*time.Minute, "--bin", binDir, "--out", out, "--duration", "30s", "--nemesis", "store",
		"--seed", "5", "--items", "150", "--log-level", "warn", "--versitygw", gw)
	t.Log(output)
	require.Equal(t, exitPass, code, output)
	noLeftovers(t, out)
	s, err := report.Read(out)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	for _, v := range s.Verdicts {
		require.True(t, v.OK, "%s: %s %v", v.Name, v.Detail, v.Examples)
	}
	settings := map[string]string{}
	for _, kv := range s.Settings {
		settings[kv[0]] = kv[1]
	}
	require.Contains(t, settings["object stores"], "chaos-1: S3 (versitygw")
	require.Contains(t, settings["object stores"], "chaos-2: file://")
	applied := map[nemesis.StoreFault]int{}
	for _, f := range s.Faults {
		require.Equal(t, nemesis.Store, f.Step.Kind)
		if f.Err == "" {
			applied[f.Step.Fault]++
		}
	}
	for _, f := range nemesis.StoreFaults() {
		require.Positive(t, applied[f], "store fault %s never applied: %+v", f, s.Faults)
	}
	v := verdict(t, s, checker.StoreResults)
	m := regexp.MustCompile(`(\d+) Done results read back .*; (\d+) results in (\d+) objects the store nemesis deleted or changed after they were recorded`).FindStringSubmatch(v.Detail)
	require.NotNil(t, m, v.Detail)
	readBack, _ := strconv.Atoi(m[1])
	excused, _ := strconv.Atoi(m[2])
	require.Greater(t, readBack, 200, v.Detail)
	require.Positive(t, excused, "the results in the objects the nemesis deleted and flipped are listed apart: %s", v.Detail)
	require.NotEmpty(t, v.Examples)
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "### store-results (passed; listed apart)")
}

// TestChaosFederation runs the federation scenario for 30s: two clusters
// of three replicas, the parent handing runs to the peer through a kill of
// each one's leader, two partitions between them and a cancel during the
// first. Every check must pass, and the federation checkers must have had
// handles, remote runs, a cancel and the parent's answers to judge.
func TestChaosFederation(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs two clusters of real processes")
	}
	out := filepath.Join(t.TempDir(), "report")
	code, output := jepsen(t, 6*time.Minute, "--bin", binDir, "--out", out, "--scenario", "federation", "--duration", "30s",
		"--seed", "3", "--items", "150", "--log-level", "warn")
	t.Log(output)
	if s, err := report.Read(out); err == nil {
		for _, v := range s.Verdicts {
			if !v.OK {
				t.Logf("%s failed: %s %v (both clusters' listings: %s)", v.Name, v.Detail, v.Examples, filepath.Join(out, "federation.json"))
			}
		}
	}
	require.Equal(t, exitPass, code, output)
	noLeftovers(t, out)
	s, err := report.Read(out)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	requireTLS(t, out, s, "c1", "c2", "c3", "w1", "w2", filepath.Join("cluster-a", "c1"))
	for _, v := range s.Verdicts {
		require.True(t, v.OK, "%s: %s %v", v.Name, v.Detail, v.Examples)
	}
	require.Contains(t, verdict(t, s, checker.FedHandles).Detail, "4 handles on a, 4 runs under a/ on b")
	require.Contains(t, verdict(t, s, checker.FedCancel).Detail, "1 acknowledged cancels")
	require.Regexp(t, `([1-9]\d*) answers of a checked`, verdict(t, s, checker.FedStatus).Detail)
	require.Contains(t, verdict(t, s, checker.FedRouting).Detail, "5 runs' clusters checked on a")
	require.Contains(t, verdict(t, s, checker.FedResults).Detail, "3 handed-off runs' results read through a and on b")
	require.Contains(t, verdict(t, s, checker.Lost).Detail, "450 items acknowledged", "the three handed-off runs' items, judged on the peer")
	require.Regexp(t, `: [1-9]\d* Done results read back through the store`, verdict(t, s, checker.StoreResults).Detail)
	hist, err := os.ReadFile(filepath.Join(out, "history.jsonl"))
	require.NoError(t, err)
	require.Contains(t, output, "federation: a's leader listed b unreachable during the 8s cut", "the cut held")
	for _, op := range []string{"kill-peer-leader", "kill-parent-leader", "partition-clusters"} {
		require.Contains(t, string(hist), `"op":"`+op+`"`)
	}
}

// TestChaosCatchesBugs proves the harness can fail: binaries built with a
// known bug must be caught by the checkers (exit 1), each by a targeted,
// deterministic scenario.
func TestChaosCatchesBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: builds bug-injected binaries and runs real processes")
	}
	root, err := testbin.ModuleRoot()
	require.NoError(t, err)
	tests := []struct {
		tag      string
		args     []string
		violates []string
		// pass are the checkers that must still pass (default: lost,
		// unexpected, incomplete, completion).
		pass []string
	}{
		// The ledger applies reports to any Running item or range: a
		// straggler's late result is accepted as a second one, for an item
		// and for a range's indexes. (Run over the proxy network, so that
		// the fallback is exercised too.)
		{"rollout_bug_nocas", []string{"--scenario", "straggler", "--net", "proxy"}, []string{checker.Duplicates, checker.Linearizable},
			[]string{checker.Lost, checker.Unexpected, checker.Incomplete, checker.Completion, checker.RangeIndexes, checker.RangeResults}},
		// The worker's epoch guard accepts a deposed leader's late answer.
		{"rollout_bug_noguard", []string{"--scenario", "stale-leader"}, []string{checker.StaleReplies, checker.Epochs}, nil},
		// The coordinator lets a worker's certificate act as any worker:
		// the hostile client's forged reports and foreign deregistrations
		// go through. (Over the proxy network: the hostile client works
		// from either.)
		{"rollout_bug_noworkerauth", []string{"--nemesis", "hostile", "--duration", "20s", "--items", "300", "--net", "proxy"},
			[]string{checker.HostileRefused}, []string{checker.Lost}},
		// A federation handle's remote run name is not deterministic: each
		// parent replica computes another, and after the parent's leader is
		// killed the new one forwards under a name the peer never saw, so
		// the peer holds a second copy of the run.
		{"rollout_bug_fedrandomid", []string{"--scenario", "federation", "--duration", "30s", "--items", "150"},
			[]string{checker.FedHandles}, []string{checker.FedRouting}},
	}
	for _, tt := range tests {
		t.Run(tt.tag, func(t *testing.T) {
			bugs := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			require.NoError(t, testbin.BuildTags(ctx, root, bugs, tt.tag))
			out := filepath.Join(t.TempDir(), "report")
			code, output := jepsen(t, 4*time.Minute, append([]string{"--bin", bugs, "--out", out, "--log-level", "warn"}, tt.args...)...)
			t.Log(output)
			require.Equal(t, exitViolation, code, output)
			noLeftovers(t, out)
			s, err := report.Read(out)
			require.NoError(t, err)
			require.Equal(t, report.Fail, s.Outcome)
			requireTLS(t, out, s, "c1", "c2", "c3", "w1")
			if tt.tag == "rollout_bug_fedrandomid" {
				require.True(t, slices.ContainsFunc(verdict(t, s, checker.FedHandles).Examples, func(e string) bool {
					return strings.Contains(e, "remote runs on b") || strings.Contains(e, "no handle on a names")
				}), "a second copy on the peer: %v", verdict(t, s, checker.FedHandles).Examples)
			}
			for _, name := range tt.violates {
				v := verdict(t, s, name)
				require.False(t, v.OK, "%s did not catch %s: %s", name, tt.tag, v.Detail)
				require.NotEmpty(t, v.Examples)
			}
			pass := tt.pass
			if pass == nil {
				pass = []string{checker.Lost, checker.Unexpected, checker.Incomplete, checker.Completion}
			}
			for _, name := range pass {
				require.True(t, verdict(t, s, name).OK, "%s should still pass", name)
			}
			if slices.Contains(tt.violates, checker.HostileRefused) {
				// Caught by the attacks the bug lets through.
				accepted := map[string]int{}
				for _, h := range s.Hostile {
					accepted[h.Attack] = h.Accepted + h.Traced
				}
				require.Positive(t, accepted[string(hostile.ForgeReportOwner)]+accepted[string(hostile.ForeignDeregister)], "%+v", s.Hostile)
			}
			if tt.tag == "rollout_bug_nocas" {
				// Caught on the range run's indexes too.
				var ex []string
				for _, name := range tt.violates {
					ex = append(ex, verdict(t, s, name).Examples...)
				}
				require.True(t, slices.ContainsFunc(ex, func(e string) bool { return strings.HasPrefix(e, "cas-ranges/#") }),
					"no violation on an index of the range run: %v", ex)
			}
			if slices.Contains(tt.violates, checker.Linearizable) {
				require.NotEmpty(t, s.Visualizations)
				for _, f := range s.Visualizations {
					_, err := os.Stat(f)
					require.NoError(t, err)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown nemesis", []string{"--nemesis", "kill,explode", "--bin", "BIN"}, `unknown nemesis "explode"`},
		{"no binaries", []string{"--bin", "/nonexistent-dir"}, "rollout-coord"},
		{"bad scenario", []string{"--scenario", "nap", "--bin", "BIN"}, "Scenario"},
		{"bad duration", []string{"--duration", "0s", "--bin", "BIN"}, "Duration"},
		{"bad net", []string{"--net", "wifi", "--bin", "BIN"}, "Net"},
		{"bad level", []string{"--log-level", "loud"}, "--log-level"},
		{"bad tls", []string{"--tls=maybe", "--bin", "BIN"}, "--tls"},
		{"federation in plaintext", []string{"--scenario", "federation", "--tls=false", "--bin", "BIN"}, "the federation scenario needs mutual TLS"},
		{"unknown flag", []string{"--nope"}, "unknown flag"},
		{"arguments", []string{"extra"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "BIN", binDir)
			}
			args = append(args, "--out", t.TempDir())
			var stdout, stderr bytes.Buffer
			code := execute(context.Background(), args, &stdout, &stderr)
			require.Equal(t, exitHarness, code, stderr.String())
			require.Contains(t, stderr.String(), tt.want)
		})
	}
}
