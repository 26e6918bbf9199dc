// Package summary renders the short table of benchmark figures that
// docs/BENCHMARKS.md opens with ("In short") from the rows of the results
// files that `make bench` writes, and keeps that table between marker
// comments in the document: Replace writes it there (make bench-docs),
// Check says which row differs (make test). Every row names the run that
// measured its stage (date, commit, load), so that figures from different
// runs, merged into one file with `rollout-bench --merge`, say so.
//
// The package knows nothing of how a figure is measured: rollout-bench
// marks the rows that belong in the summary (Row.Summary) and records, per
// stage, the run that measured it (Run).
package summary

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Markers around the generated table in a Markdown document. Begin must
// stand alone on its line, End likewise, Begin first; the lines between
// them are the table and are overwritten by Replace.
const (
	Begin = "<!-- BEGIN GENERATED: bench summary (make bench-docs writes it from bench/results*.json; do not edit by hand) -->"
	End   = "<!-- END GENERATED: bench summary -->"
)

var (
	// ErrNoBlock is a document without exactly one pair of markers, Begin
	// before End, each on a line of its own.
	ErrNoBlock = errors.New("no generated bench summary block")
	// ErrStale is a document whose generated block differs from the
	// table the results give.
	ErrStale = errors.New("the generated bench summary is stale")
	// ErrNoRows is a results file without a single summary row: a table
	// rendered from it would claim nothing.
	ErrNoRows = errors.New("no summary rows in the results")
)

// Row is one line of rollout-bench's table (bench/results.json's "rows").
type Row struct {
	Metric string `json:"metric"`
	Value  string `json:"value"`
	Target string `json:"target,omitempty"`
	Met    string `json:"met,omitempty"` // "yes", "no" or ""
	// Stage is the stage whose figures the row shows (for a row that
	// compares two stages, the later one's: see Also).
	Stage string `json:"stage,omitempty"`
	// Also names further stages the row's figure depends on (a ratio of
	// two stages' figures), each shown with its own run.
	Also []string `json:"also,omitempty"`
	// Summary is the short label under which the row appears in the
	// summary table; "" leaves the row out of it.
	Summary string `json:"summary,omitempty"`
}

// Run says when, at which commit and under what load one stage's figures
// were measured.
type Run struct {
	// Started is when the run of rollout-bench that measured the stage
	// began (UTC).
	Started time.Time `json:"started"`
	// Commit is the source's revision (40 hex digits), "" when unknown;
	// Dirty says the work tree had uncommitted changes.
	Commit string `json:"commit,omitempty"`
	Dirty  bool   `json:"dirty,omitempty"`
	// Load1Start and Load1End are the machine's 1-minute load average
	// when the stage began and ended; nil when unknown.
	Load1Start *float64 `json:"load1_start,omitempty"`
	Load1End   *float64 `json:"load1_end,omitempty"`
}

// Label is the run as one table cell: "2026-11-27 12:31 UTC, 724b00c,
// load 0.4→1.9", with "commit unknown" and no load for a run that did not
// record them.
func (r Run) Label() string {
	var b strings.Builder
	b.WriteString(r.Started.UTC().Format("2006-01-02 15:04 MST"))
	switch {
	case r.Commit == "":
		b.WriteString(", commit unknown")
	case len(r.Commit) > 7:
		b.WriteString(", " + r.Commit[:7])
	default:
		b.WriteString(", " + r.Commit)
	}
	if r.Dirty {
		b.WriteString(" (modified)")
	}
	if r.Load1Start != nil && r.Load1End != nil {
		fmt.Fprintf(&b, ", load %.1f→%.1f", *r.Load1Start, *r.Load1End)
	}
	return b.String()
}

// Source is one results file's rows and the run of each of its stages.
type Source struct {
	// Name is the file, as the table's caption names it.
	Name string
	Rows []Row
	// Runs maps a stage to the run that measured it. A row whose stage
	// has no entry is an error of Table's.
	Runs map[string]Run
}

// Table is the Markdown table of every summary row of the sources, in
// order, each with its stage's run; it ends with a newline. A row whose
// stage (or a stage in its Also) has no run is an error naming it; no
// summary row at all is ErrNoRows.
func Table(sources ...Source) (string, error) {
	var b strings.Builder
	b.WriteString("| figure | value | target | met | measured (run, commit, 1-min load at stage start→end) |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	n := 0
	for _, s := range sources {
		for _, r := range s.Rows {
			if r.Summary == "" {
				continue
			}
			var runs []string
			for _, st := range append([]string{r.Stage}, r.Also...) {
				run, ok := s.Runs[st]
				if !ok {
					return "", fmt.Errorf("%s: row %q: stage %q has no recorded run", s.Name, r.Summary, st)
				}
				label := run.Label()
				if len(r.Also) > 0 {
					label = st + ": " + label
				}
				runs = append(runs, label)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", esc(r.Summary), esc(r.Value), esc(r.Target), esc(r.Met), esc(strings.Join(runs, "; ")))
			n++
		}
	}
	if n == 0 {
		return "", ErrNoRows
	}
	return b.String(), nil
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// block finds the generated block: the byte offsets of the start of the
// line after Begin and of the start of End's line.
func block(doc []byte) (from, to int, err error) {
	lines := bytes.SplitAfter(doc, []byte("\n"))
	begin, end, off := -1, -1, 0
	for _, l := range lines {
		t := string(bytes.TrimRight(l, "\r\n"))
		switch t {
		case Begin:
			if begin >= 0 {
				return 0, 0, fmt.Errorf("%w: %q appears twice", ErrNoBlock, Begin)
			}
			begin = off + len(l)
		case End:
			if end >= 0 {
				return 0, 0, fmt.Errorf("%w: %q appears twice", ErrNoBlock, End)
			}
			end = off
		}
		off += len(l)
	}
	switch {
	case begin < 0:
		return 0, 0, fmt.Errorf("%w: no line %q", ErrNoBlock, Begin)
	case end < 0:
		return 0, 0, fmt.Errorf("%w: no line %q", ErrNoBlock, End)
	case end < begin:
		return 0, 0, fmt.Errorf("%w: the end marker comes before the begin marker", ErrNoBlock)
	}
	return begin, end, nil
}

// Replace returns doc with its generated block holding table (which must
// end with a newline, as Table's does). doc is not modified; a document
// without a well-formed block is ErrNoBlock.
func Replace(doc []byte, table string) ([]byte, error) {
	from, to, err := block(doc)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(doc)-(to-from)+len(table))
	out = append(out, doc[:from]...)
	out = append(out, table...)
	return append(out, doc[to:]...), nil
}

// Check returns nil when doc's generated block holds exactly table, else
// ErrStale naming the first line that differs (the row the document shows
// and the row the results give), or ErrNoBlock.
func Check(doc []byte, table string) error {
	from, to, err := block(doc)
	if err != nil {
		return err
	}
	have := strings.Split(strings.TrimSuffix(string(doc[from:to]), "\n"), "\n")
	want := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	for i := 0; i < max(len(have), len(want)); i++ {
		h, w := "(no row)", "(no row)"
		if i < len(have) {
			h = strings.TrimRight(have[i], "\r")
		}
		if i < len(want) {
			w = want[i]
		}
		if h != w {
			return fmt.Errorf("%w: line %d of the block is\n\t%s\nbut the results give\n\t%s\n(run make bench-docs)", ErrStale, i+1, h, w)
		}
	}
	return nil
}

// Bytes is a size in the largest binary unit that keeps it at or above
// one (B, KiB, MiB, GiB), with one decimal below ten of that unit: a
// 126 KB snapshot is "123 KiB", never "0 MiB".
func Bytes(n int64) string {
	if n < 0 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"B", "KiB", "MiB", "GiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return fmt.Sprintf("%d B", n)
	case v < 10:
		return fmt.Sprintf("%.1f %s", v, units[u])
	default:
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
}
