// Command etcdledger is the etcd side of `make bench`: the work ledger that
// a user would build on etcd instead of rollout, driven against a running
// etcd cluster with go.etcd.io/etcd/client/v3. It lives in a Go module of
// its own so that etcd's dependencies never reach the rollout module.
//
// The ledger, per item i of run R:
//
//	/ledger/R/pending/i   exists while the item waits for a worker
//	/ledger/R/item/i      the payload (written once, at submit)
//	/ledger/R/state/i     "running/WORKER" or "done/RESULT"
//
// Submit writes items in transactions of --submit-batch items. A claim reads
// up to --claim-batch pending keys from a random point of the pending range
// and takes them in one transaction that compares every key's ModRevision
// (compare-and-swap on revisions): it deletes the pending keys and writes
// the running states; if any key moved, the transaction changes nothing and
// the worker reads again (a conflict). Completing a claimed batch is one
// transaction that compares each state key's ModRevision with the claim's
// revision and writes the done states. Results reads the state range in
// pages and checks that every item is done.
//
// It prints one JSON object (see report) on stdout and exits non-zero on
// any error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type config struct {
	endpoints   string
	run         string
	items       int
	workers     int
	concurrency int
	claimBatch  int
	submitBatch int
	payload     int
	timeout     time.Duration
}

// report is the JSON the command prints.
type report struct {
	Items          int     `json:"items"`
	Workers        int     `json:"workers"`
	Concurrency    int     `json:"concurrency"`
	ClaimBatch     int     `json:"claim_batch"`
	SubmitSeconds  float64 `json:"submit_s"`
	RunSeconds     float64 `json:"run_s"`
	ResultsSeconds float64 `json:"results_s"`
	TotalSeconds   float64 `json:"total_s"`
	ItemsPerSecond float64 `json:"items_per_s"`
	Claims         int64   `json:"claim_txns"`
	Conflicts      int64   `json:"claim_conflicts"`
	Completes      int64   `json:"complete_txns"`
	ServerVersion  string  `json:"server_version"`
}

func main() {
	var c config
	flag.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd client URLs (required)")
	flag.StringVar(&c.run, "run", "bench", "run name (key prefix)")
	flag.IntVar(&c.items, "items", 10000, "items to submit and complete")
	flag.IntVar(&c.workers, "workers", 4, "workers (one etcd client each)")
	flag.IntVar(&c.concurrency, "concurrency", 16, "claim/complete loops per worker")
	flag.IntVar(&c.claimBatch, "claim-batch", 16, "most items one claim transaction takes")
	flag.IntVar(&c.submitBatch, "submit-batch", 40, "items per submit transaction (3 ops each; etcd allows 128 ops per transaction by default)")
	flag.IntVar(&c.payload, "payload-bytes", 64, "bytes of each item's payload")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdledger:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rep, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdledger:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "etcdledger:", err)
		os.Exit(1)
	}
}

func (c config) check() error {
	switch {
	case c.endpoints == "":
		return errors.New("--endpoints is required")
	case c.items < 1, c.workers < 1, c.concurrency < 1, c.claimBatch < 1, c.payload < 0:
		return errors.New("--items, --workers, --concurrency and --claim-batch must be at least 1, --payload-bytes not negative")
	case c.submitBatch < 1 || 3*c.submitBatch > 128:
		return errors.New("--submit-batch must be between 1 and 42 (3 operations per item, 128 per transaction)")
	case strings.ContainsAny(c.run, "/ "):
		return fmt.Errorf("--run %q must not contain '/' or spaces", c.run)
	}
	return nil
}

func (c config) key(kind string, i int) string {
	return fmt.Sprintf("/ledger/%s/%s/%09d", c.run, kind, i)
}

func (c config) prefix(kind string) string { return fmt.Sprintf("/ledger/%s/%s/", c.run, kind) }

func newClient(c config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(c.endpoints, ","),
		DialTimeout: 10 * time.Second,
	})
}

func run(ctx context.Context, c config) (*report, error) {
	cli, err := newClient(c)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rep := &report{Items: c.items, Workers: c.workers, Concurrency: c.concurrency, ClaimBatch: c.claimBatch}
	if err := waitReady(ctx, cli, rep); err != nil {
		return nil, err
	}
	if _, err := cli.Delete(ctx, "/ledger/"+c.run+"/", clientv3.WithPrefix()); err != nil {
		return nil, fmt.Errorf("clearing the run: %w", err)
	}

	start := time.Now()
	if err := submit(ctx, cli, c); err != nil {
		return nil, err
	}
	rep.SubmitSeconds = time.Since(start).Seconds()

	runStart := time.Now()
	var claims, conflicts, completes atomic.Int64
	var remaining atomic.Int64
	remaining.Store(int64(c.items))
	errc := make(chan error, c.workers*c.concurrency)
	var wg sync.WaitGroup
	for w := 0; w < c.workers; w++ {
		wcli, err := newClient(c)
		if err != nil {
			return nil, err
		}
		defer wcli.Close()
		for g := 0; g < c.concurrency; g++ {
			wg.Add(1)
			go func(worker string) {
				defer wg.Done()
				if err := workLoop(ctx, wcli, c, worker, &remaining, &claims, &conflicts, &completes); err != nil {
					errc <- err
				}
			}(fmt.Sprintf("w%d", w+1))
		}
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	rep.RunSeconds = time.Since(runStart).Seconds()

	resStart := time.Now()
	if err := results(ctx, cli, c); err != nil {
		return nil, err
	}
	rep.ResultsSeconds = time.Since(resStart).Seconds()
	rep.TotalSeconds = time.Since(start).Seconds()
	rep.ItemsPerSecond = float64(c.items) / rep.TotalSeconds
	rep.Claims, rep.Conflicts, rep.Completes = claims.Load(), conflicts.Load(), completes.Load()
	return rep, nil
}

// waitReady waits until every endpoint answers Status and one reports a
// leader.
func waitReady(ctx context.Context, cli *clientv3.Client, rep *report) error {
	var last error
	for ctx.Err() == nil {
		ok := true
		for _, ep := range cli.Endpoints() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err != nil || st.Leader == 0 {
				ok, last = false, fmt.Errorf("%s: status %v", ep, err)
				break
			}
			rep.ServerVersion = st.Version
		}
		if ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd not ready: %v (%w)", last, ctx.Err())
}

func submit(ctx context.Context, cli *clientv3.Client, c config) error {
	payload := strings.Repeat("x", c.payload)
	for lo := 0; lo < c.items; lo += c.submitBatch {
		hi := min(lo+c.submitBatch, c.items)
		ops := make([]clientv3.Op, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			ops = append(ops,
				clientv3.OpPut(c.key("item", i), fmt.Sprintf(`{"prompt":"%d %s"}`, i, payload)),
				clientv3.OpPut(c.key("pending", i), ""))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("submit items %d..%d: %w", lo, hi-1, err)
		}
	}
	return nil
}

// workLoop claims and completes items until none is left.
func workLoop(ctx context.Context, cli *clientv3.Client, c config, worker string,
	remaining, claims, conflicts, completes *atomic.Int64) error {
	pending := c.prefix("pending")
	end := clientv3.GetPrefixRangeEnd(pending)
	for remaining.Load() > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d items left: %w", remaining.Load(), err)
		}
		// Read a few pending keys from a random point, wrapping around.
		from := c.key("pending", rand.IntN(c.items))
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(c.claimBatch)))
		if err != nil {
			return fmt.Errorf("claim read: %w", err)
		}
		kvs := resp.Kvs
		if len(kvs) == 0 {
			resp, err = cli.Get(ctx, pending, clientv3.WithRange(end), clientv3.WithLimit(int64(c.claimBatch)))
			if err != nil {
				return fmt.Errorf("claim read: %w", err)
			}
			kvs = resp.Kvs
		}
		if len(kvs) == 0 {
			if remaining.Load() > 0 {
				time.Sleep(time.Millisecond) // the rest is claimed by others
			}
			continue
		}
		cmps := make([]clientv3.Cmp, 0, len(kvs))
		ops := make([]clientv3.Op, 0, 2*len(kvs))
		states := make([]string, 0, len(kvs))
		for _, kv := range kvs {
			k := string(kv.Key)
			state := strings.Replace(k, "/pending/", "/state/", 1)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision))
			ops = append(ops, clientv3.OpDelete(k), clientv3.OpPut(state, "running/"+worker))
			states = append(states, state)
		}
		tr, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		claims.Add(1)
		if !tr.Succeeded {
			conflicts.Add(1)
			continue
		}
		// "Run" the items (the mock backend echoes the prompt), then
		// complete them if the claim still stands.
		rev := tr.Header.Revision
		cmps = cmps[:0]
		ops = ops[:0]
		for _, state := range states {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(state), "=", rev))
			ops = append(ops, clientv3.OpPut(state, `done/{"completion":"MOCK"}`))
		}
		tr, err = cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		completes.Add(1)
		if !tr.Succeeded {
			return errors.New("complete: a claim was lost although nobody steals (ledger bug)")
		}
		remaining.Add(-int64(len(states)))
	}
	return nil
}

// results pages through the states and checks every item is done.
func results(ctx context.Context, cli *clientv3.Client, c config) error {
	prefix := c.prefix("state")
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	done := 0
	for {
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000))
		if err != nil {
			return fmt.Errorf("results: %w", err)
		}
		for _, kv := range resp.Kvs {
			if !strings.HasPrefix(string(kv.Value), "done/") {
				return fmt.Errorf("results: %s is %q, not done", kv.Key, kv.Value)
			}
			done++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(slices.Concat(resp.Kvs[len(resp.Kvs)-1].Key, []byte{0}))
	}
	if done != c.items {
		return fmt.Errorf("results: %d of %d items done", done, c.items)
	}
	return nil
}
