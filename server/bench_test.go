package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// BenchmarkClusterThroughput measures whole-system items/s through a real
// 3-replica cluster in this process (Raft over TCP, bolt on disk, gRPC on
// loopback): 16 workers loop claim -> report DONE. It reports the rate when
// each claim and report carries 64 items and when it carries 1, and their
// ratio, all measured in the same run.
func BenchmarkClusterThroughput(b *testing.B) {
	c := newTestCluster(b, 3, clusterOpts{})
	cl := c.client()
	const workers = 16
	block := 0
	measure := func(batch, items int) float64 {
		block++
		run := fmt.Sprintf("bench-%d-%d", block, batch)
		c.submit(run, items)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var done atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("%s-w%d", run, w)
				registerWorkers(b, cl, id)
				for done.Load() < int64(items) && ctx.Err() == nil {
					resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: id, MaxItems: uint32(batch), WaitMs: 50})
					if err != nil || len(resp.GetItems()) == 0 {
						continue
					}
					req := &rolloutv1.ReportRequest{WorkerId: id}
					for _, it := range resp.GetItems() {
						req.Reports = append(req.Reports, &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(),
							Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"completion":"x"}`)})
					}
					rr, err := cl.Report(ctx, req)
					require.NoError(b, err)
					done.Add(int64(len(rr.GetResults())))
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		require.Equal(b, int64(items), done.Load())
		return float64(items) / elapsed.Seconds()
	}
	b.ResetTimer()
	var batched, single float64
	for range b.N {
		batched = measure(64, 8192)
		single = measure(1, 1024)
	}
	b.ReportMetric(batched, "items/s-batch64")
	b.ReportMetric(single, "items/s-batch1")
	b.ReportMetric(batched/single, "x")
}
