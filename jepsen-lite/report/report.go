package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
)

// Outcomes of a run.
const (
	Pass  = "PASS"  // every check passed
	Fail  = "FAIL"  // a checker found a violation
	Error = "ERROR" // the harness could not run
)

// Leader is a leader the harness saw serve.
type Leader struct {
	Term uint64 `json:"term"`
	ID   string `json:"id"`
	// At is seconds since the start of the run.
	At float64 `json:"at"`
}

// FailoverStats summarises the failovers of one kind of fault.
type FailoverStats struct {
	Kind     nemesis.Kind  `json:"kind"`
	N        int           `json:"n"`
	Median   time.Duration `json:"median"`
	Max      time.Duration `json:"max"`
	TimedOut int           `json:"timed_out"`
}

// Summary is everything the report shows.
type Summary struct {
	Outcome  string `json:"outcome"`
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
	// Settings are the run's parameters, in order.
	Settings [][2]string `json:"settings"`
	// Network is the network mode, and NetworkNote why it was chosen.
	Network     string `json:"network"`
	NetworkNote string `json:"network_note,omitempty"`
	// TLS says whether every edge ran over mutual TLS (false: plaintext).
	TLS  bool    `json:"tls"`
	Wall float64 `json:"wall_seconds"`

	Ops        []checker.OpCounts `json:"ops"`
	Plan       []nemesis.Step     `json:"plan"`
	Faults     []nemesis.Applied  `json:"faults"`
	FaultCount map[string]int     `json:"fault_count"`

	Leaders       []Leader           `json:"leaders"`
	LeaderChanges int                `json:"leader_changes"`
	Failovers     []nemesis.Failover `json:"failovers"`
	FailoverStats []FailoverStats    `json:"failover_stats"`

	// Hostile counts the hostile nemesis' operations per attack.
	Hostile []checker.AttackCount `json:"hostile,omitempty"`

	Verdicts       []checker.Verdict `json:"verdicts"`
	Visualizations []string          `json:"visualizations,omitempty"`
	// Notes are remarks on the run (the straggler's answers, harness
	// errors, anything odd).
	Notes []string `json:"notes,omitempty"`
	// Start is the history time the run started (for relative times).
	Start int64 `json:"start"`
}

// Stats computes FailoverStats per kind, in AllKinds order.
func Stats(fs []nemesis.Failover) []FailoverStats {
	by := map[nemesis.Kind][]time.Duration{}
	out := map[nemesis.Kind]*FailoverStats{}
	for _, f := range fs {
		s := out[f.Kind]
		if s == nil {
			s = &FailoverStats{Kind: f.Kind}
			out[f.Kind] = s
		}
		if f.TimedOut {
			s.TimedOut++
			continue
		}
		by[f.Kind] = append(by[f.Kind], f.Took)
	}
	var res []FailoverStats
	for _, k := range nemesis.AllKinds() {
		s := out[k]
		if s == nil {
			continue
		}
		d := by[k]
		slices.Sort(d)
		s.N = len(d)
		if len(d) > 0 {
			s.Max = d[len(d)-1]
			if len(d)%2 == 1 {
				s.Median = d[len(d)/2]
			} else {
				s.Median = (d[len(d)/2-1] + d[len(d)/2]) / 2
			}
		}
		res = append(res, *s)
	}
	return res
}

// Write writes summary.md and summary.json into dir.
func Write(dir string, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	WriteMarkdown(f, s)
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Read reads the summary.json in dir.
func Read(dir string) (Summary, error) {
	var s Summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return s, fmt.Errorf("report: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("report: summary.json: %w", err)
	}
	return s, nil
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// rel formats a history time relative to the run's start.
func (s Summary) rel(t int64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", float64(t-s.Start)/1e9)
}

// WriteMarkdown renders s as Markdown.
func WriteMarkdown(w io.Writer, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# jepsen-lite report: %s\n\n", s.Outcome)
	if failed := failedNames(s.Verdicts); len(failed) > 0 {
		p("**Violations:** %s\n\n", strings.Join(failed, ", "))
	}
	p("| setting | value |\n|---|---|\n")
	p("| scenario | %s |\n| seed | %d |\n", s.Scenario, s.Seed)
	net := s.Network
	if s.NetworkNote != "" {
		net += " (" + s.NetworkNote + ")"
	}
	p("| network | %s |\n", mdEscape(net))
	if s.TLS {
		p("| mutual TLS | on (Raft, gRPC, workers and the harness's clients; dev CA) |\n")
	} else {
		p("| mutual TLS | off (plaintext) |\n")
	}
	for _, kv := range s.Settings {
		p("| %s | %s |\n", kv[0], mdEscape(kv[1]))
	}
	p("| wall time | %.1fs |\n\n", s.Wall)

	p("## Checkers\n\n| checker | verdict | count | detail |\n|---|---|---|---|\n")
	for _, v := range s.Verdicts {
		verdict := "pass"
		if !v.OK {
			verdict = "**FAIL**"
		}
		p("| %s | %s | %d | %s |\n", v.Name, verdict, v.Count, mdEscape(v.Detail))
	}
	p("\n")
	for _, v := range s.Verdicts {
		if len(v.Examples) == 0 {
			continue
		}
		if v.OK {
			p("### %s (passed; listed apart)\n\n", v.Name)
		} else {
			p("### %s\n\n", v.Name)
		}
		for _, e := range v.Examples {
			p("- %s\n", e)
		}
		p("\n")
	}
	if len(s.Visualizations) > 0 {
		p("Porcupine visualizations of non-linearizable items:\n\n")
		for _, f := range s.Visualizations {
			p("- %s\n", filepath.Base(f))
		}
		p("\n")
	}

	if len(s.Hostile) > 0 {
		p("## Hostile client\n\nOperations of the hostile nemesis (not workload operations): each must be refused and change nothing.\n\n")
		p("| attack | expected | sent | refused | inconclusive | accepted | traced in the ledger |\n|---|---|---|---|---|---|---|\n")
		for _, h := range s.Hostile {
			p("| %s | %s | %d | %d | %d | %d | %d |\n", h.Attack, mdEscape(h.Expect), h.Sent, h.Refused, h.Inconclusive, h.Accepted, h.Traced)
		}
		p("\n")
	}
	p("## Operations\n\n| op | invoked | ok | fail | unknown | open (process died) |\n|---|---|---|---|---|---|\n")
	var tot checker.OpCounts
	for _, o := range s.Ops {
		p("| %s | %d | %d | %d | %d | %d |\n", o.Op, o.Invoked, o.OK, o.Fail, o.Unknown, o.Open)
		tot.Invoked, tot.OK, tot.Fail, tot.Unknown, tot.Open = tot.Invoked+o.Invoked, tot.OK+o.OK, tot.Fail+o.Fail, tot.Unknown+o.Unknown, tot.Open+o.Open
	}
	p("| **total** | %d | %d | %d | %d | %d |\n\n", tot.Invoked, tot.OK, tot.Fail, tot.Unknown, tot.Open)

	p("## Faults injected\n\n| nemesis | count |\n|---|---|\n")
	kinds := make([]string, 0, len(s.FaultCount))
	for k := range s.FaultCount {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		p("| %s | %d |\n", k, s.FaultCount[k])
	}
	p("\n| at | healed | fault | nodes | error |\n|---|---|---|---|---|\n")
	for _, f := range s.Faults {
		fault := f.Step.String()
		if f.Detail != "" {
			fault += ": " + f.Detail
		}
		p("| %s | %s | %s | %s | %s |\n", s.rel(f.At), s.rel(f.Healed), mdEscape(fault), strings.Join(f.Nodes, " "), mdEscape(f.Err))
	}
	p("\n## Leaders\n\n%d leader changes seen.\n\n| term | leader | first seen |\n|---|---|---|\n", s.LeaderChanges)
	for _, l := range s.Leaders {
		p("| %d | %s | %.2fs |\n", l.Term, l.ID, l.At)
	}
	p("\n## Failover (fault on the leader until a new leader with a higher term serves)\n\n")
	p("| fault | n | median | max | no new leader |\n|---|---|---|---|---|\n")
	for _, f := range s.FailoverStats {
		p("| %s | %d | %s | %s | %d |\n", f.Kind, f.N, ms(f.Median), ms(f.Max), f.TimedOut)
	}
	p("\n| fault | at | old leader (term) | new leader (term) | took |\n|---|---|---|---|---|\n")
	for _, f := range s.Failovers {
		took := ms(f.Took)
		if f.TimedOut {
			took = "none"
		}
		p("| %s | %s | %s (%d) | %s (%d) | %s |\n", f.Kind, s.rel(f.At), f.OldLeader, f.OldTerm, f.NewLeader, f.NewTerm, took)
	}
	if len(s.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range s.Notes {
			p("- %s\n", n)
		}
	}
	p("\nFiles: history.jsonl (every operation), summary.json, logs/ (process logs).\n")
}

func failedNames(vs []checker.Verdict) []string {
	var out []string
	for _, v := range vs {
		if !v.OK {
			out = append(out, v.Name)
		}
	}
	return out
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}
