package raftnode

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkProposeConcurrency measures, in one run on one 3-node cluster,
// the commands per second that Propose sustains with 1 caller and with 256
// concurrent callers (64-byte commands), and reports their ratio: the gain
// from group commit. Each phase proposes b.N commands.
func BenchmarkProposeConcurrency(b *testing.B) {
	tc := newTestCluster(b, 3, nil)
	leader := tc.nodes[tc.waitAgreed()]
	var seq atomic.Uint64
	cmd := func() []byte {
		c := make([]byte, 64)
		binary.BigEndian.PutUint64(c, seq.Add(1))
		c[8] = 'b' // never one of the test FSM's special commands
		return c
	}
	run := func(callers int) float64 {
		var (
			wg     sync.WaitGroup
			next   atomic.Int64
			failed atomic.Int64
		)
		start := time.Now()
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					ctx, cancel := context.WithTimeout(context.Background(), waitFor)
					_, err := leader.Propose(ctx, cmd())
					cancel()
					if err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d proposals failed", n, b.N)
		}
		return float64(b.N) / elapsed.Seconds()
	}

	b.ResetTimer()
	one := run(1)
	many := run(256)
	b.StopTimer()
	b.ReportMetric(one, "cmds/s-1caller")
	b.ReportMetric(many, "cmds/s-256callers")
	b.ReportMetric(many/one, "ratio-256/1")
	b.ReportMetric(0, "ns/op") // the time per op mixes both phases; the rates above are the result
}
