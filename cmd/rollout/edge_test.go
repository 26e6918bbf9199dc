package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
)

// liveReplica is one real coordinator replica in this process (Raft node,
// ledger, gRPC service with mutual TLS and the replica's server options),
// wired as cmd/rollout-coord wires it, plus a client certificate for the CLI.
type liveReplica struct {
	addr   string
	certs  string
	node   *raftnode.Node
	ledger *fsm.Ledger
}

// dataPrefix is the key prefix of run's objects as the replica's ledger
// recorded it.
func (r *liveReplica) dataPrefix(t *testing.T, run string) string {
	t.Helper()
	p, ok := r.ledger.RunDataPrefix(run)
	require.True(t, ok, "no run %q", run)
	return p
}

func startLiveReplica(t *testing.T) *liveReplica {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}, {Name: "cli", Role: mtls.RoleClient}, {Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	tlsConf, err := mtls.FilesFor(dir, "c1").Load()
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	grpcAddr := lis.Addr().String()
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr, rc.TLS = "c1", filepath.Join(dir, "data"), "127.0.0.1:0", tlsConf
	rc.Logger = hclog.NewNullLogger()
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EpochCommand("c1", grpcAddr)
	}
	node, err := raftnode.New(rc, ledger)
	require.NoError(t, err)
	sc := server.DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr = "c1", grpcAddr
	svc, err := server.New(sc, node, ledger)
	require.NoError(t, err)
	gopts := append(server.NewAuthz(false).ServerOptions(), svc.GRPCOptions()...)
	g := grpc.NewServer(append(gopts, grpc.Creds(credentials.NewTLS(tlsConf)))...)
	svc.RegisterOn(g)
	go g.Serve(lis)
	t.Cleanup(func() {
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
	require.NoError(t, node.Bootstrap())
	require.Eventually(t, func() bool { _, ok := node.ServingTerm(); return ok }, 20*time.Second, 10*time.Millisecond)
	return &liveReplica{addr: grpcAddr, certs: dir, node: node, ledger: ledger}
}

// cli runs the CLI against the replica with the client certificate.
func (r *liveReplica) cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	return r.cliAs(t, "cli", args...)
}

// cliAs runs the CLI against the replica with the certificate of name
// ("cli": a client's, "w1": a worker's).
func (r *liveReplica) cliAs(t *testing.T, name string, args ...string) cliResult {
	t.Helper()
	f := mtls.FilesFor(r.certs, name)
	args = append(args, "--coord", r.addr, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--timeout", "10s")
	return runCLI(t, nil, args...)
}

// raw is a plain gRPC client of the replica with the client certificate
// (a hostile client's view: no CLI checks, no retries).
func (r *liveReplica) raw(t *testing.T) rolloutv1.CoordinatorClient {
	t.Helper()
	tlsConf, err := mtls.FilesFor(r.certs, "cli").Load()
	require.NoError(t, err)
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return rolloutv1.NewCoordinatorClient(cc)
}

// inject proposes a submit straight to the ledger, bypassing the API edge
// (as items written by an older version, or by a hostile client before the
// edge checked anything, sit in a ledger).
func (r *liveReplica) inject(t *testing.T, run string, items ...*fsmpb.NewItem) {
	t.Helper()
	// The run is the CLI's certificate's (tenant cli), as its submit would
	// make it.
	data, err := fsm.EncodeCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: &fsmpb.SubmitItemsCmd{Run: run, Items: items, Tenant: "cli"}}})
	require.NoError(t, err)
	applied, err := r.node.Propose(context.Background(), data)
	require.NoError(t, err)
	res, ok := applied.Result.(fsm.Result)
	if p, isPtr := applied.Result.(*fsm.Result); isPtr {
		res, ok = *p, true
	}
	require.True(t, ok, "%T", applied.Result)
	require.NoError(t, res.Err)
}

func sampleID(s string) []byte { return []byte(fmt.Sprintf("%-32s", s)) }

// TestResultsSurviveOneBadItem: items that reached the ledger without the
// edge's checks (a 3-byte id, a payload that is not JSON) used to make
// `rollout results` fail for the whole run, forever. Now each is an error
// line with its reason and the other items are written; in an OpenAI Batch
// run they go to errors.jsonl.
func TestResultsSurviveOneBadItem(t *testing.T) {
	r := startLiveReplica(t)
	r.inject(t, "r",
		&fsmpb.NewItem{Id: sampleID("a"), Index: 0, Payload: []byte(`{"prompt":"a"}`), DeadReason: "backend said no"},
		&fsmpb.NewItem{Id: []byte("abc"), Index: 1, Payload: []byte(`{"prompt":"b"}`), DeadReason: "x"},
		&fsmpb.NewItem{Id: sampleID("c"), Index: 2, Payload: []byte("not json"), DeadReason: "x"},
		&fsmpb.NewItem{Id: sampleID("d"), Index: 3, Payload: []byte(`{"prompt":"d"}`), DeadReason: "backend said no"},
	)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	res := r.cli(t, "results", "--run", "r", "-o", out)
	require.Equal(t, 0, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stdout, "4 lines (0 done, 4 dead); 2 item(s) could not be rendered")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 4)
	for _, l := range lines {
		require.True(t, json.Valid([]byte(l)), l)
	}
	require.Contains(t, lines[0], `"error":"backend said no"`)
	require.Contains(t, lines[1], `"index":1`)
	require.Contains(t, lines[1], "3-byte id")
	require.Contains(t, lines[2], `"index":2`)
	require.Contains(t, lines[2], "not valid JSON")
	require.Contains(t, lines[3], `"error":"backend said no"`)

	// An OpenAI Batch run: the unrenderable items' lines go to errors.jsonl.
	openai := func(id string) []byte {
		return []byte(`{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`)
	}
	r.inject(t, "o",
		&fsmpb.NewItem{Id: sampleID("o0"), Index: 0, Payload: openai("c0"), DeadReason: "failed"},
		&fsmpb.NewItem{Id: []byte("o1"), Index: 1, Payload: openai("c1"), DeadReason: "failed"},
		&fsmpb.NewItem{Id: sampleID("o2"), Index: 2, Payload: []byte("{broken"), DeadReason: "failed"},
	)
	dir := t.TempDir()
	conf := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(conf, []byte("[model]\nuri = \"m\"\n[input]\nglob = \"in/*.jsonl\"\n[output]\ndir = \"out\"\n"), 0o644))
	res = r.cli(t, "results", "--config", conf, "--run", "o")
	require.Equal(t, 0, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stdout, "errors.jsonl: 3 lines")
	errs, err := os.ReadFile(filepath.Join(dir, "out", "errors.jsonl"))
	require.NoError(t, err)
	el := strings.Split(strings.TrimSpace(string(errs)), "\n")
	require.Len(t, el, 3)
	require.Contains(t, el[0], `"code":"item_failed"`)
	require.Contains(t, el[1], `"custom_id":"c1"`)
	require.Contains(t, el[1], `"code":"unrenderable_item"`)
	require.Contains(t, el[2], "cannot render item")
}

// TestHostileSubmitThenResultsStillWork: a run submitted by the CLI, then
// hostile SubmitItems straight over gRPC into it (a 3-byte id, a payload
// that is not JSON): each is INVALID_ARGUMENT, the run keeps its items, and
// `rollout results` still works for it.
func TestHostileSubmitThenResultsStillWork(t *testing.T) {
	r := startLiveReplica(t)
	in := writeInput(t, 5)
	res := r.cli(t, "submit", "--input", in, "--run", "r")
	require.Equal(t, 0, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	cl := r.raw(t)
	for _, it := range []*rolloutv1.SubmitItem{
		{Id: []byte("abc"), Index: 9, Payload: []byte(`{"prompt":"x"}`)},
		{Id: sampleID("z"), Index: 9, Payload: []byte("<html>")},
	} {
		_, err := cl.SubmitItems(context.Background(), &rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{it}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
	st, err := cl.RunStatus(context.Background(), &rolloutv1.RunStatusRequest{Run: "r"})
	require.NoError(t, err)
	require.EqualValues(t, 5, st.GetRuns()[0].GetTotal())
	out := filepath.Join(t.TempDir(), "out.jsonl")
	res = r.cli(t, "results", "--run", "r", "-o", out)
	require.Equal(t, exitIncomplete, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stdout, "5 lines missing: 5 pending")
}

// TestOversizedLineRefusedBeforeCreate: a 2 MiB line (the CLI's own line
// limit is 16 MiB) is refused against the limit the coordinator announces,
// as FILE:LINE, before any run is created; it used to leave a half-created
// run that --wait never saw finish.
func TestOversizedLineRefusedBeforeCreate(t *testing.T) {
	r := startLiveReplica(t)
	path := filepath.Join(t.TempDir(), "in.jsonl")
	big := `{"prompt":"` + strings.Repeat("x", 2<<20) + `"}`
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt":"a"}`+"\n"+big+"\n"+`{"prompt":"c"}`+"\n"), 0o644))
	res := r.cli(t, "submit", "--input", path, "--run", "big", "--wait")
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, fmt.Sprintf("%s:2: line is %d bytes, exceeds the per-item limit of %d bytes", path, len(big), validate.DefaultLimits().MaxPayloadBytes))
	require.Contains(t, res.stderr, "nothing was submitted")
	_, err := r.raw(t).RunStatus(context.Background(), &rolloutv1.RunStatusRequest{Run: "big"})
	require.Equal(t, codes.NotFound, status.Code(err), "no run was created: %v", err)

	// With --skip-invalid the line is recorded as a failed item and the
	// rest is submitted.
	res = r.cli(t, "submit", "--input", path, "--run", "big", "--skip-invalid")
	require.Equal(t, 0, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stdout, "2 created, 1 recorded as failed")
}

// TestEmptyInputRefused: an input with no items is an error and nothing is
// sent.
func TestEmptyInputRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("\n  \n\n"), 0o644))
	fake := newFakeCoord()
	res := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "r")
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, "has no items")
	require.Empty(t, fake.Submits)
}

// TestSubmitRefusesOutputInsideInputGlob: a config whose output directory
// lies inside its input glob is refused (naming both) before anything is
// sent.
func TestSubmitRefusesOutputInsideInputGlob(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "a.jsonl"), []byte(`{"prompt":"a"}`+"\n"), 0o644))
	conf := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(conf, []byte("[model]\nuri = \"m\"\n[input]\nglob = \"data/*.jsonl\"\n[output]\ndir = \"data\"\n"), 0o644))
	fake := newFakeCoord()
	res := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", conf)
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, filepath.Join(dir, "data")+" is inside the input glob "+filepath.Join(dir, "data", "*.jsonl"))
	require.Empty(t, fake.Submits)
	require.Zero(t, fake.Clusters)
}
