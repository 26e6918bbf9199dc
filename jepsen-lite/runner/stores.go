package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/s3server"
	"github.com/rollout/rollout/jepsen-lite/workload"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// storeOptions are the harness's own store options: retries that outlast
// a store fault's hold, attempts bounded well inside the completion bound.
func storeOptions() store.Options {
	o := store.DefaultOptions()
	o.Attempts, o.Backoff, o.MaxBackoff, o.OpTimeout = 8, 100*time.Millisecond, 2*time.Second, 15*time.Second
	return o
}

// runStores are the object stores of a chaos run's runs: the first run's
// in a real S3-compatible server (versitygw, started here) when its binary
// is found, every other run's in a file:// directory. They implement the
// store nemesis (nemesis.Stores) and read every recorded result back at the
// end (checker.StoreInput).
type runStores struct {
	log  hclog.Logger
	srv  *s3server.Server // nil without versitygw
	runs []string
	// byRun are the runs' stores; byURL the same by URL (for the
	// straggler, which learns a run's store from its items).
	byRun map[string]*store.Store
	byURL map[string]*store.Store
	// ranged are the runs with the range layout: checkRanges reads them
	// back, and the object faults leave them alone (a range chunk has no
	// per-line hash, so a flipped line would be read as another line; the
	// server faults reach them when they share the S3 server).
	ranged []string
	// reader reads the ledger for the object faults (recorded in the
	// history like every workload read); readerMu keeps its operations
	// sequential (an input fault's stall watcher reads beside them).
	reader   *workload.Client
	readerMu sync.Mutex
	// seenLive records, per run, the object of the first stall RunStatus
	// showed while an input fault held (checker.StoreInput.SeenLive).
	liveMu   sync.Mutex
	seenLive map[string]string
}

var _ nemesis.Stores = (*runStores)(nil)

// noS3 as startStores's bin starts no S3 server: every run uses file://.
const noS3 = "-"

// startStores starts the S3 server (unless no versitygw is found: then
// every run uses file:// and the returned note says why) and opens every
// run's store under dir. host is where the server listens: an address the
// workers reach. bin is versitygw; empty: s3server.Binary looks for it,
// also above near; noS3: no server.
func startStores(ctx context.Context, log hclog.Logger, dir, host, bin, near string, runs []string) (*runStores, string, error) {
	r := &runStores{log: log.Named("stores"), runs: slices.Clone(runs), byRun: map[string]*store.Store{}, byURL: map[string]*store.Store{}}
	var note string
	if bin == noS3 {
		bin = ""
	} else if bin == "" {
		var err error
		if bin, err = s3server.Binary(near); err != nil {
			note = fmt.Sprintf("no S3 server: %v; every run keeps its data in a file:// store, and the store nemesis only deletes and flips objects", err)
		}
	}
	if bin != "" {
		srv, err := s3server.Start(s3server.Config{Bin: bin, Dir: filepath.Join(dir, "s3"), Host: host})
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrHarness, err)
		}
		r.srv = srv
		// The harness's clients and the workers it starts (which inherit
		// its environment) use the server's credentials.
		for k, v := range s3server.Env(dir) {
			if err := os.Setenv(k, v); err != nil {
				r.close()
				return nil, "", fmt.Errorf("%w: %v", ErrHarness, err)
			}
		}
	}
	for i, run := range runs {
		url := "file://" + filepath.Join(dir, "file")
		if i == 0 && r.srv != nil {
			url = r.srv.URL
		}
		st, err := store.Open(ctx, url, storeOptions())
		if err != nil {
			r.close()
			return nil, "", fmt.Errorf("%w: opening the store of run %s: %v", ErrHarness, run, err)
		}
		// By the URL runs record: the store's normal form.
		if prev := r.byURL[st.URL()]; prev != nil {
			_ = st.Close()
			st = prev
		}
		r.byRun[run], r.byURL[st.URL()] = st, st
	}
	return r, note, nil
}

// faults returns the store faults these stores allow.
func (r *runStores) faults() []nemesis.StoreFault {
	if r.srv == nil {
		return nemesis.ObjectFaults()
	}
	return nemesis.StoreFaults()
}

// describe says which run's data lives where (for the report).
func (r *runStores) describe() string {
	var out []string
	for _, run := range r.runs {
		kind := "file://"
		if r.srv != nil && storeurl.SameStore(r.byRun[run].URL(), r.srv.URL) {
			kind = "S3 (versitygw on " + r.srv.Addr() + ")"
		}
		out = append(out, run+": "+kind)
	}
	return fmt.Sprint(out)
}

// open returns the store of url (the straggler's opener), any spelling.
func (r *runStores) open(_ context.Context, url string) (*store.Store, error) {
	if normal, err := storeurl.Normalize(url); err == nil && r.byURL[normal] != nil {
		return r.byURL[normal], nil
	}
	return nil, fmt.Errorf("%w: no store %q in this run", ErrHarness, url)
}

func (r *runStores) close() {
	closed := map[*store.Store]bool{}
	for _, st := range r.byRun {
		if !closed[st] {
			closed[st] = true
			_ = st.Close()
		}
	}
	if r.srv != nil {
		_ = r.srv.Close()
	}
}

// once makes a heal idempotent (the step's own heal and HealAll may both
// call it).
func once(f func(context.Context) error) func(context.Context) error {
	var o sync.Once
	var err error
	return func(ctx context.Context) error {
		o.Do(func() { err = f(ctx) })
		return err
	}
}

// Fault applies one store fault (nemesis.Stores).
func (r *runStores) Fault(ctx context.Context, s nemesis.Step) (nemesis.StoreDamage, func(context.Context) error, error) {
	rng := rand.New(rand.NewPCG(s.Pick, 0x73746f7265))
	if s.Fault.IsServer() {
		return r.serverFault(s.Fault)
	}
	runs := slices.DeleteFunc(slices.Clone(r.runs), func(run string) bool { return slices.Contains(r.ranged, run) })
	if len(runs) == 0 {
		return nemesis.StoreDamage{}, nil, fmt.Errorf("no run takes object faults (range runs are left out)")
	}
	run := runs[rng.IntN(len(runs))]
	st := r.byRun[run]
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r.readerMu.Lock()
	items, err := r.reader.ReadAll(rctx, run)
	r.readerMu.Unlock()
	cancel()
	if err != nil {
		return nemesis.StoreDamage{}, nil, fmt.Errorf("reading run %s to pick an object: %w", run, err)
	}
	flip := s.Fault == nemesis.FlipResult || s.Fault == nemesis.FlipInput
	switch s.Fault {
	case nemesis.DeleteResult, nemesis.FlipResult:
		// An object holding results the ledger recorded.
		byObj := map[string][]history.Item{}
		for _, it := range items {
			if ref := it.GetResultRef(); ref != nil && it.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE {
				byObj[ref.GetObject()] = append(byObj[ref.GetObject()], history.Item{Run: run, ID: history.IDString(it.GetId()), Index: it.GetIndex()})
			}
		}
		key := pick(rng, byObj)
		if key == "" {
			return nemesis.StoreDamage{}, nil, fmt.Errorf("run %s has no recorded result yet", run)
		}
		verb, err := damageObject(ctx, st, key, flip, rng)
		if err != nil {
			return nemesis.StoreDamage{}, nil, err
		}
		d := nemesis.StoreDamage{Nodes: []string{run}, Object: key, Items: byObj[key],
			Detail: fmt.Sprintf("%s %s (%d recorded results; not healed)", verb, key, len(byObj[key]))}
		return d, func(context.Context) error { return nil }, nil
	default:
		return r.inputFault(ctx, st, run, items, flip, rng)
	}
}

// inputFault damages the input chunks of run until the heal, which puts
// their bytes back: one that items not finished yet reference (else any),
// and every chunk the submitter writes while the fault holds (workers
// finish a chunk's items soon after it is submitted, so only new chunks
// are sure to be read while damaged).
func (r *runStores) inputFault(ctx context.Context, st *store.Store, run string, items []*rolloutv1.ResultItem, flip bool, rng *rand.Rand) (nemesis.StoreDamage, func(context.Context) error, error) {
	byObj := map[string]int{}
	for _, it := range items {
		if ref := it.GetPayloadRef(); ref != nil && it.GetState() != rolloutv1.ItemState_ITEM_STATE_DONE && it.GetState() != rolloutv1.ItemState_ITEM_STATE_DEAD {
			byObj[ref.GetObject()]++
		}
	}
	if len(byObj) == 0 {
		for _, it := range items {
			if ref := it.GetPayloadRef(); ref != nil {
				byObj[ref.GetObject()] += 0
			}
		}
	}
	first := pick(rng, byObj)
	if first == "" {
		return nemesis.StoreDamage{}, nil, fmt.Errorf("run %s has no input chunk yet", run)
	}
	var mu sync.Mutex
	orig := map[string][]byte{} // the damaged chunks' bytes
	damage := func(key string) error {
		b, err := st.ReadAll(ctx, key)
		if err != nil {
			return fmt.Errorf("reading %s before damaging it: %w", key, err)
		}
		mu.Lock()
		orig[key] = b
		mu.Unlock()
		_, err = damageObject(ctx, st, key, flip, rng)
		return err
	}
	if err := damage(first); err != nil {
		return nemesis.StoreDamage{}, nil, err
	}
	// Watch for new chunks while the fault holds.
	known := map[string]bool{}
	_ = st.List(ctx, store.InputPrefix(run), func(o store.Object) error { known[o.Key] = true; return nil })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var fresh []string
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = st.List(lctx, store.InputPrefix(run), func(o store.Object) error {
				if !known[o.Key] {
					known[o.Key] = true
					fresh = append(fresh, o.Key)
				}
				return nil
			})
			cancel()
			for _, k := range fresh {
				if err := damage(k); err != nil {
					r.log.Warn("store nemesis: damaging a new input chunk", "key", k, "error", err)
				}
			}
		}
	})
	// Watch the run's status while the fault holds: a worker that reads a
	// damaged chunk reports its item held and the run shows stalled.
	wg.Go(func() { r.watchStall(ctx, run, stop) })
	verb := "deleted"
	if flip {
		verb = "flipped a byte of"
	}
	// No Object in the damage: input chunks hold no results.
	d := nemesis.StoreDamage{Nodes: []string{run},
		Detail: fmt.Sprintf("%s input chunk %s (%d unfinished items reference it) and every chunk of %s written until the heal, which restores them", verb, first, byObj[first], run)}
	heal := once(func(hctx context.Context) error {
		close(stop)
		wg.Wait()
		pctx, cancel := context.WithTimeout(hctx, time.Minute)
		defer cancel()
		var errs []error
		keys := make([]string, 0, len(orig))
		for k := range orig {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := st.Put(pctx, k, orig[k]); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s: %w", k, err))
			}
		}
		r.log.Info("store nemesis: input chunks restored", "run", run, "chunks", len(keys))
		return errors.Join(errs...)
	})
	return d, heal, nil
}

// watchStall polls run's status until stop is closed and records the
// first stall it shows (seenLive).
func (r *runStores) watchStall(ctx context.Context, run string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r.readerMu.Lock()
		s, err := r.reader.RunStall(sctx, run)
		r.readerMu.Unlock()
		cancel()
		if err != nil || s == nil {
			continue
		}
		r.liveMu.Lock()
		if r.seenLive == nil {
			r.seenLive = map[string]string{}
		}
		_, seen := r.seenLive[run]
		if !seen {
			r.seenLive[run] = s.GetObject()
		}
		r.liveMu.Unlock()
		if !seen {
			r.log.Info("store nemesis: the run shows stalled", "run", run, "object", s.GetObject(), "reason", s.GetReason())
		}
	}
}

// stalls reads every run's run-stalled and run-resumed events and its
// stall now through the API (the end of a chaos run: every heal applied).
func (r *runStores) stalls(ctx context.Context, in *checker.StoreInput) error {
	r.readerMu.Lock()
	defer r.readerMu.Unlock()
	for _, run := range r.runs {
		evs, err := r.reader.StallEvents(ctx, run)
		if err != nil {
			return fmt.Errorf("reading run %s's events: %w", run, err)
		}
		for _, e := range evs {
			kind := "stalled"
			if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED {
				kind = "resumed"
			}
			in.Stalls = append(in.Stalls, checker.StallEvent{Run: run, Kind: kind, Detail: e.GetDetail(), UnixMs: e.GetUnixMs()})
		}
		s, err := r.reader.RunStall(ctx, run)
		if err != nil {
			return fmt.Errorf("reading run %s's status: %w", run, err)
		}
		if s != nil {
			in.StalledAtEnd = append(in.StalledAtEnd, run)
		}
	}
	r.liveMu.Lock()
	in.SeenLive = maps.Clone(r.seenLive)
	r.liveMu.Unlock()
	return nil
}

// pick returns one key of m chosen by rng ("" for none).
func pick[V any](rng *rand.Rand, m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return keys[rng.IntN(len(keys))]
}

// damageObject deletes key, or changes one of its bytes (same size, so
// that an existence-and-size check cannot tell).
func damageObject(ctx context.Context, st *store.Store, key string, flip bool, rng *rand.Rand) (string, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !flip {
		if err := st.Delete(dctx, key); err != nil {
			return "", fmt.Errorf("deleting %s: %w", key, err)
		}
		return "deleted", nil
	}
	b, err := st.ReadAll(dctx, key)
	if err != nil {
		return "", fmt.Errorf("reading %s to flip a byte: %w", key, err)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("%s is empty: no byte to flip", key)
	}
	i := rng.IntN(len(b))
	b[i] ^= 0x01
	if err := st.Put(dctx, key, b); err != nil {
		return "", fmt.Errorf("writing %s with a flipped byte: %w", key, err)
	}
	return fmt.Sprintf("flipped byte %d of", i), nil
}

// serverFault stops, pauses or slows the S3 server.
func (r *runStores) serverFault(f nemesis.StoreFault) (nemesis.StoreDamage, func(context.Context) error, error) {
	if r.srv == nil {
		return nemesis.StoreDamage{}, nil, fmt.Errorf("%s: no S3 server in this run", f)
	}
	d := nemesis.StoreDamage{Nodes: []string{"s3"}}
	switch f {
	case nemesis.StoreKill:
		if err := r.srv.Kill(); err != nil {
			return d, nil, err
		}
		d.Detail = "SIGKILL versitygw; restarted at the heal"
		return d, once(func(context.Context) error { return r.srv.Restart() }), nil
	case nemesis.StorePause:
		if err := r.srv.Pause(); err != nil {
			return d, nil, err
		}
		d.Detail = "SIGSTOP versitygw; SIGCONT at the heal"
		return d, once(func(context.Context) error { return r.srv.Resume() }), nil
	default: // StoreSlow
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				if err := r.srv.Pause(); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
				}
				if err := r.srv.Resume(); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(150 * time.Millisecond):
				}
			}
		})
		d.Detail = "versitygw SIGSTOPped 300 ms in every 450 ms until the heal"
		return d, once(func(context.Context) error {
			close(stop)
			wg.Wait()
			return r.srv.Resume()
		}), nil
	}
}

// check reads every Done item's result of every run back through its
// store, each object once, and checks each result against its blake3.
func (r *runStores) check(ctx context.Context, final map[string][]*rolloutv1.ResultItem) checker.StoreInput {
	in := checker.StoreInput{Runs: slices.Clone(r.runs)}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.stalls(cctx, &in); err != nil {
		in.Err = err.Error()
		return in
	}
	for _, run := range r.runs {
		st := r.byRun[run]
		objs := map[string][]byte{}
		errs := map[string]error{}
		for _, it := range final[run] {
			si := checker.StoreItem{Run: run, Index: it.GetIndex(), ID: history.IDString(it.GetId()),
				State: shortState(it.GetState()), Reason: it.GetReason()}
			if ref := it.GetResultRef(); ref != nil && it.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE {
				key := ref.GetObject()
				si.Object = key
				if _, seen := objs[key]; !seen && errs[key] == nil {
					b, err := st.ReadAll(cctx, key)
					if errors.Is(err, store.ErrUnavailable) || cctx.Err() != nil {
						in.Err = fmt.Sprintf("run %s: %v", run, err)
						return in
					}
					objs[key], errs[key] = b, err
				}
				si.Err = checkRef(key, objs[key], errs[key], ref)
			}
			in.Items = append(in.Items, si)
		}
	}
	return in
}

// checkRef says why ref's bytes in an object read as (b, err) are not its
// result ("" when they are).
func checkRef(key string, b []byte, err error, ref *rolloutv1.DataRef) string {
	if err != nil {
		return err.Error()
	}
	off, n := ref.GetOffset(), ref.GetLength()
	if off+n > uint64(len(b)) {
		return fmt.Sprintf("%s has %d bytes, the reference names %d..%d", key, len(b), off, off+n)
	}
	if sum := store.Hash(b[off : off+n]); string(sum[:]) != string(ref.GetBlake3()) {
		return fmt.Sprintf("bytes %d..%d of %s do not match the recorded blake3", off, off+n, key)
	}
	return ""
}

func shortState(s rolloutv1.ItemState) string {
	const p = "ITEM_STATE_"
	name := s.String()
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):]
	}
	return name
}

// storeHost is where the S3 server listens: the harness's address on the
// namespaces' bridge (the workers' namespaces reach it; the harness is
// never cut off), else loopback.
func storeHost(f fabric) string {
	if n, ok := f.(*network.NetNS); ok {
		if ip, ok := n.IP(network.Ctl); ok {
			return ip
		}
	}
	return "127.0.0.1"
}

// checkRanges reads every range run back for range-results: what a correct
// worker records for each of its totals[run] indexes (workload.RangeWant),
// the final ledger's records (final), and every result object a Done
// record names, read through the run's store.
func (r *runStores) checkRanges(ctx context.Context, final map[string][]*rolloutv1.ResultItem, totals map[string]uint64) []checker.RangeRun {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out := make([]checker.RangeRun, 0, len(r.ranged))
	for _, run := range r.ranged {
		rr, err := r.readRange(cctx, run, final[run], totals[run])
		if err != nil {
			rr.Err = err.Error()
		}
		out = append(out, rr)
	}
	return out
}

// readRange reads range run run back (checkRanges): a store that cannot
// be reached at all is an error; an object that cannot be read is noted
// on the object.
func (r *runStores) readRange(ctx context.Context, run string, recs []*rolloutv1.ResultItem, total uint64) (checker.RangeRun, error) {
	rr := checker.RangeRun{Run: run, Objects: map[string]checker.RangeObject{}}
	for idx := range total {
		sid, res, err := workload.RangeWant(ctx, run, idx)
		if err != nil {
			return rr, fmt.Errorf("the expected result of index %d: %w", idx, err)
		}
		rr.Want = append(rr.Want, checker.RangeWant{SampleID: sid, Result: res})
	}
	st := r.byRun[run]
	for _, it := range recs {
		rec := checker.RangeRecord{Index: it.GetIndex(), Count: max(it.GetCount(), 1), State: shortState(it.GetState())}
		if ref := it.GetResultRef(); ref != nil && it.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE {
			rec.Object, rec.Blake3 = ref.GetObject(), ref.GetBlake3()
			if _, seen := rr.Objects[rec.Object]; !seen {
				b, err := st.ReadAll(ctx, rec.Object)
				if errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
					return rr, fmt.Errorf("reading %s: %w", rec.Object, err)
				}
				obj := checker.RangeObject{Data: b}
				if err != nil {
					obj = checker.RangeObject{Err: err.Error()}
				}
				rr.Objects[rec.Object] = obj
			}
		}
		rr.Records = append(rr.Records, rec)
	}
	return rr, nil
}
