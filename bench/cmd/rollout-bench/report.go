package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rollout/rollout/bench/summary"
)

// Row is one line of the table: its stage, and the label under which
// docs/BENCHMARKS.md's generated summary shows it (if it does).
type Row = summary.Row

func metStr(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func gcName(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func human(n float64) string {
	switch {
	case n >= 100:
		s := fmt.Sprintf("%.0f", n)
		// thousands separators
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case n >= 10:
		return fmt.Sprintf("%.1f", n)
	default:
		return fmt.Sprintf("%.2f", n)
	}
}

// bytesStr is a size in B or KiB.
func bytesStr(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// mib is a size in adaptive binary units (KiB, MiB, GiB): a small
// snapshot is "123 KiB", not "0 MiB".
func mib(b int64) string { return summary.Bytes(b) }

// ours is the reference figure: 4 workers with group commit, else the best
// group-commit run.
func ours(res *Results) (ThroughputRun, bool) {
	var best ThroughputRun
	found := false
	for _, r := range res.Throughput {
		if r.GroupCommit && r.Workers == 4 {
			return r, true
		}
		if r.GroupCommit && r.ItemsPerS > best.ItemsPerS {
			best, found = r, true
		}
	}
	return best, found
}

// rows builds the table from the results (targets from issue 11). Each
// row names its stage; the rows that docs/BENCHMARKS.md's generated
// summary shows carry their summary label (sum marks the row just added):
// to change that table, change the labels here and run make bench-docs.
func rows(res *Results) []Row {
	var out []Row
	stage := ""
	add := func(metric, value, target, met string) {
		out = append(out, Row{Metric: metric, Value: value, Target: target, Met: met, Stage: stage})
	}
	sum := func(label string, also ...string) {
		out[len(out)-1].Summary = label
		out[len(out)-1].Also = also
	}
	stage = "throughput"
	for _, r := range res.Throughput {
		target, met := "", ""
		if r.Workers == 4 && r.GroupCommit {
			target, met = "≥ 50,000", metStr(r.ItemsPerS >= 50000)
		}
		note := ""
		if r.LeaderChanged {
			note = " (leader changed)"
		}
		add(fmt.Sprintf("1. items/s end to end, %d workers, group commit %s", r.Workers, gcName(r.GroupCommit)),
			fmt.Sprintf("%s (%s items/entry)%s", human(r.ItemsPerS), human(r.ItemsPerEntry), note), target, met)
		if r.Workers == 4 && r.GroupCommit {
			sum("items/s end to end, 4 mock workers, group commit")
		}
	}
	ref, haveRef := ours(res)
	stage = "barelog"
	if len(res.BareLog) > 0 {
		var ceiling BareLogRun
		for _, b := range res.BareLog {
			v := human(b.CmdsPerS)
			if b.LeaderLostApplies > 0 {
				v += fmt.Sprintf(" (%d applies lost to leader changes)", b.LeaderLostApplies)
			}
			add("2. bare log cmds/s, "+b.Name, v, "", "")
			if b.CmdsPerS > ceiling.CmdsPerS {
				ceiling = b
			}
		}
		if haveRef {
			// The target compares with the bare log batched as raftnode
			// batches (many commands per entry, MaxInflightBatches in
			// flight); the best variant is the ceiling.
			for _, b := range res.BareLog {
				if b.CmdsPerEntry > 1 && b.Inflight == 4 {
					frac := ref.ItemsPerS / b.CmdsPerS
					add(fmt.Sprintf("2. ours (%d workers) as a share of the bare batched log (%s)", ref.Workers, b.Name),
						fmt.Sprintf("%.1f%%", 100*frac), "≥ 25%", metStr(frac >= 0.25))
					sum(fmt.Sprintf("rollout (%d workers) as a share of the bare batched hashicorp/raft log", ref.Workers), "throughput")
				}
			}
			add(fmt.Sprintf("2. ours (%d workers) as a share of the bare log's best (%s)", ref.Workers, ceiling.Name),
				fmt.Sprintf("%.1f%%", 100*ref.ItemsPerS/ceiling.CmdsPerS), "", "")
		}
	}
	stage = "etcd"
	if e := res.Etcd; e != nil {
		add(fmt.Sprintf("3. etcd %s ledger items/s (%d clients × %d, claim batch %d)", e.Version, e.Workers, e.Concurrency, e.ClaimBatch),
			fmt.Sprintf("%s (%d of %d claim txns conflicted)", human(e.ItemsPerS), e.ClaimConflicts, e.ClaimTxns), "", "")
		if haveRef && e.ItemsPerS > 0 {
			ratio := ref.ItemsPerS / e.ItemsPerS
			add(fmt.Sprintf("3. ours (%d workers) ÷ etcd ledger", ref.Workers), fmt.Sprintf("%.1f×", ratio), "≥ 20×", metStr(ratio >= 20))
			sum(fmt.Sprintf("rollout (%d workers) ÷ the same ledger on a 3-member etcd", ref.Workers), "throughput")
		}
	}
	stage = "throughput"
	if l := res.Latency; l != nil {
		add(fmt.Sprintf("4. claim latency p50 / p99 (probe, under %d workers' load)", l.Workers),
			fmt.Sprintf("%.1f / %.1f ms (%d claims)", l.ClaimP50MS, l.ClaimP99MS, l.Claims), "", "")
		sum("claim latency p50 / p99 under load")
		add(fmt.Sprintf("4. report latency p50 / p99 (probe, under %d workers' load)", l.Workers),
			fmt.Sprintf("%.1f / %.1f ms (%d reports)", l.ReportP50MS, l.ReportP99MS, l.Reports), "", "")
	}
	stage = "failover"
	if f := res.Failover; f != nil {
		if len(f.KillMS) > 0 {
			add(fmt.Sprintf("5. leader SIGKILL → next item done, median (%d kills%s)", len(f.KillMS), layoutNote(f.Layout)),
				fmt.Sprintf("%.0f ms", f.KillMedianMS), "≤ 800 ms", metStr(f.KillMedianMS <= 800))
			sum("leader SIGKILL → next item done, median")
			add("5. leader SIGKILL → next item done, max", fmt.Sprintf("%.0f ms", f.KillMaxMS), "≤ 1,500 ms", metStr(f.KillMaxMS <= 1500))
			sum("leader SIGKILL → next item done, max")
		}
		if len(f.TransferMS) > 0 {
			add(fmt.Sprintf("5. graceful transfer (SIGTERM) → next item done, median (%d)", len(f.TransferMS)),
				fmt.Sprintf("%.0f ms (max %.0f)", f.TransferMedMS, f.TransferMaxMS), "≤ 100 ms", metStr(f.TransferMedMS <= 100))
			sum("graceful leadership transfer → next item done, median")
		}
		add("5. elections beyond one per failover", fmt.Sprintf("%d (%d terms)", f.Spurious, f.Terms), "report", "")
	}
	// The same at a --raft-multiplier above 1: every Raft timeout scaled,
	// so failover is expected about that many times slower (no target).
	for _, f := range res.FailoverMultiplied {
		m := f.RaftMultiplier
		if len(f.KillMS) > 0 {
			add(fmt.Sprintf("5. --raft-multiplier %d: leader SIGKILL → next item done, median (%d kills%s)", m, len(f.KillMS), layoutNote(f.Layout)),
				fmt.Sprintf("%.0f ms (max %.0f)", f.KillMedianMS, f.KillMaxMS), "report", "")
			sum(fmt.Sprintf("leader SIGKILL → next item done, median, --raft-multiplier %d", m))
		}
		if len(f.TransferMS) > 0 {
			add(fmt.Sprintf("5. --raft-multiplier %d: graceful transfer (SIGTERM) → next item done, median (%d)", m, len(f.TransferMS)),
				fmt.Sprintf("%.0f ms (max %.0f)", f.TransferMedMS, f.TransferMaxMS), "report", "")
			sum(fmt.Sprintf("graceful leadership transfer → next item done, median, --raft-multiplier %d", m))
		}
		add(fmt.Sprintf("5. --raft-multiplier %d: elections beyond one per failover", m), fmt.Sprintf("%d (%d terms)", f.Spurious, f.Terms), "report", "")
	}
	stage = "steal"
	if s := res.Steal; s != nil {
		add(fmt.Sprintf("6. thief idle → stolen items in hand, p50 (claim finds nothing, then Steal%s)", layoutNote(s.Layout)),
			fmt.Sprintf("%.1f ms (p99 %.1f)", s.IdleP50MS, s.IdleP99MS), "≤ 100 ms", metStr(s.IdleP50MS <= 100))
		sum("idle thief → stolen items in hand, p50")
		if len(s.WorkerRoundMS) > 0 {
			add(fmt.Sprintf("6. rollout-worker idle → next stolen item done, p50 (no-wait claim, then Steal; a busy worker polls ≤ 1 s%s)", layoutNote(s.Layout)),
				fmt.Sprintf("%.0f ms (start → first: %.0f ms)", s.WorkerRoundP50MS, s.WorkerFirstMS), "", "")
		}
	}
	stage = "scale"
	if s := res.Scale; s != nil {
		add(fmt.Sprintf("7. submit %s items (CLI)", human(float64(s.Items))),
			fmt.Sprintf("%.1f s (%s items/s)", s.SubmitS, human(s.SubmitItemsPerS)), "", "")
		sum(fmt.Sprintf("submit %s items with the CLI", human(float64(s.Items))))
		if s.LeaderPeakRSS > 0 {
			add("7. leader peak RSS", mib(s.LeaderPeakRSS), "≤ 1,536 MiB", metStr(s.LeaderPeakRSS <= 1536<<20))
			sum(fmt.Sprintf("%s items: leader peak RSS", human(float64(s.Items))))
		}
		if s.SnapshotBytes > 0 {
			add("7. snapshot size / time (leader)", fmt.Sprintf("%s / %.2f s", mib(s.SnapshotBytes), s.SnapshotS), "", "")
			sum(fmt.Sprintf("%s items: snapshot size / time", human(float64(s.Items))))
		}
		if s.RestoreS > 0 || s.RestartCaughtUpS > 0 {
			add("7. snapshot restore (restart → caught up)", fmt.Sprintf("%.2f s (%.2f s)", s.RestoreS, s.RestartCaughtUpS), "≤ 10 s", metStr(s.RestoreS <= 10))
			sum(fmt.Sprintf("%s items: snapshot restore (restart → caught up)", human(float64(s.Items))))
		}
		if s.NewReplicaS > 0 {
			how := "log replay"
			if s.NewReplicaByInstall {
				how = "snapshot install"
			}
			add("7. new replica (empty disk) caught up", fmt.Sprintf("%.2f s (%s)", s.NewReplicaS, how), "≤ 30 s", metStr(s.NewReplicaS <= 30))
			sum(fmt.Sprintf("%s items: new replica (empty disk) caught up", human(float64(s.Items))))
		}
	}
	stage = "payload"
	if p := res.Payload; p != nil && p.WallS > 0 {
		note := ""
		if p.LeaderChanged {
			note = " (leader changed)"
		}
		add(fmt.Sprintf("9. data plane: %s items × %s prompts, 4 workers, submit → results, items/s", human(float64(p.Items)), bytesStr(p.PromptBytes)),
			fmt.Sprintf("%s (%.0f MB/s of input, %d results verified)%s", human(p.ItemsPerS), p.MBPerS, p.Verified, note),
			fmt.Sprintf("≥ %s", human(payloadItemsPerSTarget)), metStr(p.ItemsPerS >= payloadItemsPerSTarget))
		sum(fmt.Sprintf("data plane: %s × %s prompts through a file store, items/s", human(float64(p.Items)), bytesStr(p.PromptBytes)))
		for _, r := range p.Replicas {
			role, target, met := "follower", "", ""
			if r.Leader {
				role, target, met = "leader", "≤ 250 MB (238 MiB)", metStr(r.PeakRSS <= payloadLeaderRSSTarget)
			}
			add(fmt.Sprintf("9. data plane: %s %s peak RSS", role, r.ID), mib(r.PeakRSS), target, met)
			if r.Leader {
				sum("data plane: leader peak RSS")
			}
		}
		for _, r := range p.Replicas {
			add(fmt.Sprintf("9. data plane: %s data directory (raft.db)", r.ID),
				fmt.Sprintf("%s (%s)", mib(r.DataDir.Bytes), mib(r.RaftDB)), "≤ 40 MB (38 MiB)", metStr(r.DataDir.Bytes <= payloadDataDirTarget))
		}
		if c := p.CPU; c.Total > 0 {
			add("9. data plane: CPU µs/item: leader / follower (each) / workers (all 4) / CLI submit / CLI results",
				fmt.Sprintf("%.0f / %.0f / %.0f / %.0f / %.0f (all: %.0f)", c.Leader, c.Followers, c.Workers, c.CLISubmit, c.CLIResults, c.Total),
				fmt.Sprintf("all ≤ %.0f", payloadCPUTarget), metStr(c.Total <= payloadCPUTarget))
			sum("data plane: CPU µs per item, all processes (leader / follower each / workers / CLI submit / CLI results)")
		}
		if p.LogBytesItem > 0 {
			add("9. data plane: Raft command bytes appended per item", fmt.Sprintf("%.0f B", p.LogBytesItem), "", "")
		}
		payloadLimitRows(p, "9. data plane:", "data plane", add, sum)
	}
	if p := res.PayloadS3; p != nil && p.WallS > 0 {
		note := ""
		if p.LeaderChanged {
			note = " (leader changed)"
		}
		add(fmt.Sprintf("9. data plane through S3 (versitygw on loopback): %s items × %s prompts, 4 workers, submit → results, items/s", human(float64(p.Items)), bytesStr(p.PromptBytes)),
			fmt.Sprintf("%s (%.0f MB/s of input, %d results verified)%s", human(p.ItemsPerS), p.MBPerS, p.Verified, note),
			fmt.Sprintf("≥ %s", human(payloadS3ItemsPerSTarget)), metStr(p.ItemsPerS >= payloadS3ItemsPerSTarget))
		sum(fmt.Sprintf("data plane: %s × %s prompts through S3 (versitygw on loopback), items/s", human(float64(p.Items)), bytesStr(p.PromptBytes)))
		if l := p.Leader(); l.PeakRSS > 0 {
			add(fmt.Sprintf("9. data plane through S3: leader %s peak RSS", l.ID), mib(l.PeakRSS), "", "")
		}
		if c := p.CPU; c.Total > 0 {
			add("9. data plane through S3: CPU µs/item: leader / follower (each) / workers (all 4) / CLI submit / CLI results",
				fmt.Sprintf("%.0f / %.0f / %.0f / %.0f / %.0f (all: %.0f)", c.Leader, c.Followers, c.Workers, c.CLISubmit, c.CLIResults, c.Total), "", "")
		}
		payloadLimitRows(p, "9. data plane through S3:", "data plane through S3", add, sum)
	}
	stage = "scale-e2e"
	if s := res.ScaleE2E; s != nil && len(s.Phases) == 2 {
		pre := fmt.Sprintf("10. scale-e2e %s × %s:", human(float64(s.Items)), bytesStr(s.PromptBytes))
		// The summary's labels name the prompt size too: make bench-scale
		// runs tiny items (32 B), issue 17's runs were of 1 KiB.
		sl := fmt.Sprintf("scale-e2e, %s items × %s", human(float64(s.Items)), bytesStr(s.PromptBytes))
		var leader ReplicaMem
		for _, r := range s.Replicas {
			if r.Leader {
				leader = r
			}
		}
		// Issue 41's target is for tiny items; a run of larger prompts
		// has none.
		target, met := "", ""
		if s.PromptBytes <= scaleE2ETinyBytes {
			target, met = fmt.Sprintf("≥ %s", human(scaleE2EItemsPerSTarget)), metStr(s.ItemsPerS >= scaleE2EItemsPerSTarget)
		}
		add(pre+" items/s submit → results (verified)", fmt.Sprintf("%s (%d of %d results exact)", human(s.ItemsPerS), s.Verified, s.Items), target, met)
		sum(sl + ": items/s submit → results")
		if s.WallS > 0 {
			add(pre+" wall time submit → results, both runs", fmt.Sprintf("%.1f s", s.WallS), "", "")
		}
		var most ReplicaMem
		for _, r := range s.Replicas {
			if r.PeakRSS > most.PeakRSS {
				most = r
			}
		}
		note := ""
		if s.LeaderChanged {
			note = fmt.Sprintf(" (leader changed: %s at the start)", s.LeaderID)
		}
		// The target is at 10M items: a smaller run is judged by its
		// prediction for 10M.
		peak, at := float64(leader.PeakRSS), ""
		if s.Items < 10_000_000 {
			peak += s.Slope.PeakBytesPerItem * float64(10_000_000-s.Items)
			at = fmt.Sprintf("; predicted at 10M: %.1f GiB", peak/(1<<30))
		}
		add(pre+" leader peak RSS (the most of any replica)", fmt.Sprintf("%s %s (%s %s)%s%s", leader.ID, mib(leader.PeakRSS), most.ID, mib(most.PeakRSS), note, at),
			"≤ 256 MiB at 10M", metStr(leader.PeakRSS > 0 && peak <= scaleE2ELeaderRSSTarget))
		sum(sl + ": leader peak RSS")
		add(pre+fmt.Sprintf(" %s peak RSS slope %s → %s items", s.Slope.Replica, human(float64(s.MidItems)), human(float64(s.Items))),
			fmt.Sprintf("%.0f B/item (100M: %.1f GiB, 1B: %.0f GiB)", s.Slope.PeakBytesPerItem, s.Slope.At100M/(1<<30), s.Slope.At1B/(1<<30)), "", "")
		if s.Slope.At1B > 0 {
			at100, how := s.Slope.At100M, "predicted"
			if s.Items >= 100_000_000 {
				at100, how = float64(leader.PeakRSS), "measured"
			}
			add(pre+" leader peak RSS at 100M items / extrapolated to 1B",
				fmt.Sprintf("%s %s / %s", mib(int64(at100)), how, mib(int64(s.Slope.At1B))),
				"≤ 256 MiB / ≤ 1 GiB", metStr(at100 > 0 && at100 <= scaleE2ELeaderRSS100MTarget && s.Slope.At1B <= scaleE2ELeaderRSS1BTarget))
			sum(sl + ": leader peak RSS at 100M items / extrapolated to 1B")
		}
		add(pre+" Raft log: command bytes appended / raft.db size, per item", fmt.Sprintf("%.2f B / %.2f B", s.LogPerItem, s.RaftDBItem),
			"≤ 2 B", metStr(s.LogPerItem > 0 && s.LogPerItem <= scaleE2ELogTarget))
		sum(sl + ": Raft log bytes per item (appended / raft.db)")
		add(pre+" snapshot per item (size / time)", fmt.Sprintf("%.3f B (%s / %.1f s)", s.Snapshot.PerItem, mib(s.Snapshot.Bytes), s.Snapshot.S),
			"≤ 1 B", metStr(s.Snapshot.Bytes > 0 && s.Snapshot.PerItem <= scaleE2ESnapshotTarget))
		sum(sl + ": snapshot bytes per item")
		add(pre+" follower restart → caught up (restore)", fmt.Sprintf("%.1f s (%.1f s)", s.RestartS, s.RestoreS),
			"≤ 30 s", metStr(s.RestartS > 0 && s.RestartS <= scaleE2ERestartTarget.Seconds()))
	}
	stage = "fairness"
	if f := res.Fairness; f != nil {
		from := len(out)
		fairnessRows(f, add)
		for i := from; i < len(out); i++ {
			switch {
			case strings.HasPrefix(out[i].Metric, "11. fairness: tenant B's"):
				out[i].Summary = "fairness: a small run beside a large one, done after its submit"
			case strings.HasPrefix(out[i].Metric, "11. fairness: weights"):
				out[i].Summary = "fairness: items done by weight"
			}
		}
	}
	stage = "liveness"
	if l := res.Liveness; l != nil {
		if r := l.NoWorkers; r != nil {
			add("11. liveness: no workers registered, leader CPU (% of one core) / Raft entries/s",
				fmt.Sprintf("%.1f%% / %s%s", r.LeaderCPUPct, human(r.EntriesPerS), electionNote(r.LeaderChanged, r.Elections)), "", "")
		}
		for _, r := range l.Idle {
			interval := fmt.Sprintf("%.0f ms default", r.IntervalMS)
			if r.Asked {
				interval = fmt.Sprintf("%.0f ms asked", r.IntervalMS)
			}
			note := electionNote(r.LeaderChanged, r.Elections)
			add(fmt.Sprintf("11. liveness: %s idle workers, leader CPU (%% of one core)", count(uint64(r.Workers))),
				fmt.Sprintf("%.1f%% (%s heartbeats/s, interval %s, RSS %s)%s", r.LeaderCPUPct, human(r.HeartbeatsPerS), interval, mib(r.LeaderRSS), note),
				"≤ 10%", metStr(r.LeaderCPUPct <= livenessCPUTarget))
			if r.Workers == l.Idle[len(l.Idle)-1].Workers {
				sum(fmt.Sprintf("liveness: %s idle workers, leader CPU (%% of one core)", count(uint64(r.Workers))))
			}
			add(fmt.Sprintf("11. liveness: %s idle workers, Raft entries/s", count(uint64(r.Workers))),
				fmt.Sprintf("%s%s", human(r.EntriesPerS), note), "≤ 1", metStr(r.EntriesPerS <= livenessEntriesTarget))
		}
		if b := l.Busy; b != nil {
			note := electionNote(b.LeaderChanged, b.Elections)
			if b.RunFinished {
				note += " (the run finished inside the window)"
			}
			add(fmt.Sprintf("11. liveness: %d busy rollout-workers + %s idle, Raft entries/s against work RPCs/s", b.BusyWorkers, count(uint64(b.IdleWorkers))),
				fmt.Sprintf("%s entries/s; %s work RPCs/s, %s heartbeats/s, %s items/s, leader CPU %.1f%%%s",
					human(b.EntriesPerS), human(b.WorkRPCsPerS), human(b.HeartbeatsPerS), human(b.ItemsPerS), b.LeaderCPUPct, note),
				"entries/s ≤ work RPCs/s + 1", metStr(b.EntriesPerS <= b.WorkRPCsPerS+1))
		}
		if k := l.WorkerKill; k != nil {
			v := fmt.Sprintf("%.1f s (%.1f s after its last heartbeat)%s", k.DeclaredMS/1000, k.SinceLastMS/1000, killElections(k.Elections))
			if !k.Declared {
				v = fmt.Sprintf("not declared within %.0f s%s", k.DeclaredMS/1000, killElections(k.Elections))
			}
			add(fmt.Sprintf("11. liveness: worker stopped (as SIGKILL) → declared lost, %s workers", count(uint64(k.Workers))),
				v, fmt.Sprintf("≤ failure timeout + 1 s (%.0f s)", k.LimitMS/1000), metStr(k.Declared && k.DeclaredMS <= k.LimitMS))
		}
		if k := l.LeaderKill; k != nil {
			n := fmt.Sprintf("%d", k.Expired)
			if k.Lower {
				n = "≥ " + n
			}
			add(fmt.Sprintf("11. liveness: leader SIGKILL, %s workers heartbeating → workers expired in the next %.0f s", count(uint64(k.Workers)), k.WatchS),
				fmt.Sprintf("%s (serving again after %.0f ms; %d re-registered, %d heartbeat errors)%s", n, k.ServingMS, k.Reregistered, k.HeartbeatErrors, killElections(k.Elections)),
				"0", metStr(k.Expired == 0 && !k.Lower))
			sum(fmt.Sprintf("liveness: leader SIGKILL beside %s workers, workers expired", count(uint64(k.Workers))))
		}
	}
	stage = "throughput"
	if c := res.CPU; c != nil {
		add(fmt.Sprintf("8. CPU µs/item: leader / follower (each) / workers (all %d) / CLI", c.Workers),
			fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", c.LeaderUS, c.FollowerUS, c.WorkersUS, c.CLIUS), "", "")
		add("8. CPU µs/item, all processes", fmt.Sprintf("%.1f", c.TotalUS), "≤ 40", metStr(c.TotalUS <= 40))
		sum("CPU µs per item, all processes")
	}
	for _, st := range mapsKeys(res.Errors) {
		e := res.Errors[st]
		if i := strings.IndexByte(e, '\n'); i >= 0 {
			e = e[:i]
		}
		stage = st
		add("FAILED stage "+st, e, "", "")
		sum("FAILED stage " + st)
	}
	return out
}

// payloadLimitRows are issue 41's rows of a payload run (none for a run
// written before them): the machine's floor on the same input, the end to
// end rate as a share of it, and each part alone (submit, the workers,
// results) beside it. pre starts each metric, label each summary label.
func payloadLimitRows(p *Payload, pre, label string, add func(metric, value, target, met string), sum func(label string, also ...string)) {
	f := p.Floor
	if f != nil && f.ReadHashWriteMBPerS > 0 {
		// The s3 run shares the file run's floor (one input, one
		// measurement): shown once.
		if p.StoreKind != payloadStoreS3 {
			v := fmt.Sprintf("%s / %s / %s MB/s (best of %d)", human(f.ReadMBPerS), human(f.ReadHashMBPerS), human(f.ReadHashWriteMBPerS), f.Passes)
			for _, c := range f.Commands {
				v += fmt.Sprintf("; %s: %s MB/s", c.Command, human(c.MBPerS))
			}
			if len(f.Missing) > 0 {
				v += fmt.Sprintf("; not on PATH: %s", strings.Join(f.Missing, ", "))
			}
			add(pre+" the machine's floor on the same input: read / read+blake3 / read+blake3+write (in process)", v, "", "")
			sum(label + ": the machine's floor on the same input, read / read+blake3 / read+blake3+write")
		}
		v := fmt.Sprintf("%.1f%% (%s of %s MB/s)", 100*f.share(p.MBPerS), human(p.MBPerS), human(f.ReadHashWriteMBPerS))
		if p.Items > 0 && p.CPU.Total > 0 {
			// The floor's time per item is one core's CPU per item: the
			// run's CPU per item, all processes, beside it.
			floorUS := float64(f.Bytes) / f.ReadHashWriteMBPerS / float64(p.Items)
			v += fmt.Sprintf("; CPU %s µs/item, the floor's %.2f", human(p.CPU.Total), floorUS)
		}
		add(pre+" submit → results as a share of the floor (read+blake3+write)", v, "", "")
	}
	a := p.Alone
	if a == nil {
		return
	}
	for _, ph := range []struct {
		what    string
		ph      PayloadPhase
		target  bool
		summary string
	}{
		{"rollout submit alone (no worker running; until the run is recorded)", a.Submit, true, "rollout submit alone, share of the machine's read+blake3+write floor"},
		{"the 4 workers alone (started after the submit; until every item is done)", a.Workers, false, ""},
		{"rollout results alone (after every item is done; until the file is written)", a.Results, true, "rollout results alone, share of the machine's read+blake3+write floor"},
	} {
		v := fmt.Sprintf("%s items/s, %.0f MB/s of input", human(ph.ph.ItemsPerS), ph.ph.MBPerS)
		share := f.share(ph.ph.MBPerS)
		if share > 0 {
			v += fmt.Sprintf(", %.1f%% of the floor", 100*share)
		}
		v += fmt.Sprintf("; CPU %.0f µs/item", ph.ph.CPUPerItemUS)
		target, met := "", ""
		if ph.target {
			target = fmt.Sprintf("≥ %.0f%% of the floor", 100*floorTargetShare)
			met = metStr(share >= floorTargetShare)
		}
		add(pre+" "+ph.what, v, target, met)
		if ph.summary != "" {
			sum(label + ": " + ph.summary)
		}
	}
}

func printTable(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\nrollout-bench: %d cores (%s), %s, %s, TLS %v, wall %.0fs\n\n",
		res.Machine.Cores, res.Machine.CPUModel, res.Machine.GoVersion, res.Machine.OS, res.TLS, res.WallS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tvalue\ttarget\tmet")
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Metric, r.Value, r.Target, r.Met)
	}
	tw.Flush()
}

// writeMarkdown writes the table as Markdown (for docs/BENCHMARKS.md).
func writeMarkdown(w io.Writer, res *Results) {
	fmt.Fprintf(w, "Run of %s: %d cores (%s), %s, %s, TLS %v, wall time %.0f s.\n\n",
		res.Started.Format("2006-01-02 15:04 MST"), res.Machine.Cores, res.Machine.CPUModel, res.Machine.GoVersion, res.Machine.OS, res.TLS, res.WallS)
	// Every stage says which run measured it (date, commit, load at its
	// start and end): stages kept by --merge come from earlier runs.
	runs := stageRuns(res)
	var kept []string
	for _, st := range res.Stages {
		if r, ok := runs[st]; ok {
			kept = append(kept, fmt.Sprintf("%s (%s)", st, r.Label()))
		}
	}
	if len(kept) > 0 {
		fmt.Fprintf(w, "Each stage's run (date, commit, 1-min load at the stage's start→end): %s.\n\n", strings.Join(kept, "; "))
	}
	fmt.Fprintln(w, "| metric | value | target | met |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range res.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", esc(r.Metric), esc(r.Value), esc(r.Target), r.Met)
	}
}

// layoutNote is ", LAYOUT" for a row's label, or "" when the result
// names no layout (one written before the field).
func layoutNote(layout string) string {
	if layout == "" {
		return ""
	}
	return ", " + layout
}

// electionNote says that elections happened during a liveness window (or
// wait), and whether the leader of the figures changed, or "".
func electionNote(changed bool, elections uint64) string {
	switch {
	case changed:
		return fmt.Sprintf(" (leader changed; %d elections)", elections)
	case elections > 0:
		return fmt.Sprintf(" (%d elections, window measured again)", elections)
	}
	return ""
}

// killElections says how many elections fell between a worker's stop and
// its expiry, or "".
func killElections(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d elections meanwhile: each gives a full grace period)", n)
}

// Targets of issue 29.
const (
	livenessCPUTarget     = 10.0 // % of one core, idle fleet
	livenessEntriesTarget = 1.0  // Raft entries/s, idle fleet
)
