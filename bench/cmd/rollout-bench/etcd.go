package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/procs"
)

// EtcdRun is the etcd ledger's run (bench/etcdledger's report) on a
// 3-member etcd cluster on loopback, with the CPU the etcd members used.
type EtcdRun struct {
	Version        string  `json:"etcd_version"`
	Items          int     `json:"items"`
	Workers        int     `json:"workers"`
	Concurrency    int     `json:"concurrency"`
	ClaimBatch     int     `json:"claim_batch"`
	SubmitS        float64 `json:"submit_s"`
	RunS           float64 `json:"run_s"`
	ResultsS       float64 `json:"results_s"`
	TotalS         float64 `json:"total_s"`
	ItemsPerS      float64 `json:"items_per_s"`
	ClaimTxns      int64   `json:"claim_txns"`
	ClaimConflicts int64   `json:"claim_conflicts"`
	CompleteTxns   int64   `json:"complete_txns"`
	ServerCPUUS    float64 `json:"server_cpu_per_item_us"`
	DriverCPUUS    float64 `json:"driver_cpu_per_item_us"`
}

func (b *bench) etcd(ctx context.Context) error {
	if _, err := os.Stat(b.cfg.etcdDriver); err != nil {
		return fmt.Errorf("no etcd driver at %s (build it: cd bench/etcdledger && go build -o BIN/etcdledger .)", b.cfg.etcdDriver)
	}
	etcdBin, err := exec.LookPath(b.cfg.etcdBin)
	if err != nil {
		return fmt.Errorf("no etcd server %q (Debian: apt-get install etcd-server): %w", b.cfg.etcdBin, err)
	}
	ver, _ := exec.CommandContext(ctx, etcdBin, "--version").Output()
	dir, err := b.stageDir("etcd")
	if err != nil {
		return err
	}
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	sup := procs.New(logs)
	defer sup.StopAll(5 * time.Second)
	ports, err := freeport.Ports(6)
	if err != nil {
		return err
	}
	var initial, endpoints []string
	for i := 0; i < 3; i++ {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("e%d", i+1)
		client := endpoints[i]
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		_, err := sup.Start(name, 0, etcdBin,
			"--name", name,
			"--data-dir", filepath.Join(dir, "data", name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "rollout-bench",
			"--log-level", "warn")
		if err != nil {
			return err
		}
	}
	cpu0 := map[string]time.Duration{}
	for _, p := range sup.Procs() {
		cpu0[p.Name], _ = procCPU(p.Pid())
	}

	cmd := exec.CommandContext(ctx, b.cfg.etcdDriver,
		"--endpoints", strings.Join(endpoints, ","),
		"--items", strconv.Itoa(b.cfg.etcdItems), "--workers", "4", "--concurrency", "16",
		"--claim-batch", "16", "--timeout", "4m")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = childAttr()
	if err := cmd.Run(); err != nil {
		if p := sup.Unexpected(); p != nil {
			return fmt.Errorf("etcd member %s exited: %v\n%s", p.Name, p.Err(), p.TailLines(10))
		}
		return fmt.Errorf("etcdledger: %w\n%s", err, stderr.String())
	}
	var rep struct {
		Items          int     `json:"items"`
		Workers        int     `json:"workers"`
		Concurrency    int     `json:"concurrency"`
		ClaimBatch     int     `json:"claim_batch"`
		SubmitS        float64 `json:"submit_s"`
		RunS           float64 `json:"run_s"`
		ResultsS       float64 `json:"results_s"`
		TotalS         float64 `json:"total_s"`
		ItemsPerS      float64 `json:"items_per_s"`
		ClaimTxns      int64   `json:"claim_txns"`
		ClaimConflicts int64   `json:"claim_conflicts"`
		CompleteTxns   int64   `json:"complete_txns"`
		ServerVersion  string  `json:"server_version"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return fmt.Errorf("etcdledger printed %q: %w", stdout.String(), err)
	}
	var server time.Duration
	for _, p := range sup.Procs() {
		d, _ := procCPU(p.Pid())
		server += d - cpu0[p.Name]
	}
	items := float64(rep.Items)
	r := &EtcdRun{
		Version: rep.ServerVersion, Items: rep.Items, Workers: rep.Workers, Concurrency: rep.Concurrency,
		ClaimBatch: rep.ClaimBatch, SubmitS: rep.SubmitS, RunS: rep.RunS, ResultsS: rep.ResultsS,
		TotalS: rep.TotalS, ItemsPerS: rep.ItemsPerS, ClaimTxns: rep.ClaimTxns,
		ClaimConflicts: rep.ClaimConflicts, CompleteTxns: rep.CompleteTxns,
		ServerCPUUS: float64(server) / float64(time.Microsecond) / items,
	}
	if ps := cmd.ProcessState; ps != nil {
		r.DriverCPUUS = float64(ps.UserTime()+ps.SystemTime()) / float64(time.Microsecond) / items
	}
	if r.Version == "" {
		r.Version = strings.TrimSpace(strings.SplitN(string(ver), "\n", 2)[0])
	}
	b.res.Machine.Etcd = r.Version
	b.res.Etcd = r
	b.logf("etcd %s ledger: %.0f items/s (%d claim txns, %d conflicts)", r.Version, r.ItemsPerS, r.ClaimTxns, r.ClaimConflicts)
	return nil
}
