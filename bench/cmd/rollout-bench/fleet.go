package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/mtls"
)

// fleetConfig configures a fleet of simulated idle workers.
type fleetConfig struct {
	// Addrs are the replicas' gRPC addresses, the believed leader first.
	Addrs []string
	// TLSDir is the cluster's CA directory (localcluster.Cluster.TLSDir):
	// each simulated worker gets a certificate of its own issued from it
	// (mtls.IssueCerts, role worker, Common Name = its worker id), as a
	// real fleet's workers each hold their own. Empty: plaintext (a
	// replica running --insecure checks no identity).
	TLSDir string
	// Interval is the workers' own heartbeat interval (rollout-worker's
	// default, 1 s); a worker waits the longer of it and the interval
	// the leader's last reply asked, shortened by a random fraction of up
	// to Jitter (0..1; rollout-worker: a fifth), as rollout-worker does.
	Interval time.Duration
	Jitter   float64
	// PerSourceAddr is how many workers share one loopback source address
	// (127.77.x.y): a real fleet connects from many hosts, and one address
	// for ten thousand connections would both need the replicas' per-IP
	// limit lifted far past what a deployment uses and drain the machine's
	// shared ephemeral ports (a client binding many sockets to one
	// address makes every other client's connect fail).
	PerSourceAddr int
	// RegisterConcurrency bounds the Registers (and their TLS handshakes)
	// in flight while the fleet grows.
	RegisterConcurrency int
}

// fleet is many simulated idle workers in this process. Each has its own
// worker id, its own certificate, its own coordclient.Client (its own
// connection, leader discovery and epoch guard) and speaks the real
// protocol: Register, then Heartbeat with an empty backlog at the interval
// rollout-worker uses (the longer of its own and the one the leader's last
// reply asked, HeartbeatResponse.next_heartbeat_ms, jittered shorter; its
// own after a failed heartbeat); a heartbeat answered "not registered"
// registers again, as rollout-worker does. It never claims: an idle worker's long-polls are not what the
// liveness stage measures.
//
// A fleet's methods may be called from any goroutine; Close stops every
// worker and waits for them.
type fleet struct {
	cfg fleetConfig

	mu      sync.Mutex
	workers []*simWorker
	closed  bool

	wg sync.WaitGroup

	// Counters over the fleet's life.
	heartbeats   atomic.Int64 // heartbeats answered
	hbErrors     atomic.Int64 // heartbeats that failed (after the client's retries)
	reregistered atomic.Int64 // heartbeats answered "not registered", then registered again
	// askedMS is the interval the last answered heartbeat asked, in ms (0:
	// none asked); ttlMS the TTL it announced (0: none).
	askedMS atomic.Int64
	ttlMS   atomic.Int64
}

// simWorker is one simulated worker. Its client, tls, dial and addrs
// belong to its own goroutine once it runs (Grow's registration before).
type simWorker struct {
	id     string
	client *coordclient.Client
	tls    *tls.Config
	dial   func(context.Context, string) (net.Conn, error)
	// addrs are the client's replicas, the leader it was made for first.
	addrs  []string
	cancel context.CancelFunc
	done   chan struct{}
	// lastOK is the time (UnixNano) the last heartbeat or register was
	// answered.
	lastOK atomic.Int64
	// askedMS is the interval the last reply asked this worker for, in ms
	// (0: none asked).
	askedMS atomic.Int64
}

// newFleet returns an empty fleet (Grow starts its workers). Zero fields
// of cfg take defaults: Interval 1 s, PerSourceAddr 50,
// RegisterConcurrency 32.
func newFleet(cfg fleetConfig) *fleet {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.PerSourceAddr <= 0 {
		cfg.PerSourceAddr = 50
	}
	if cfg.RegisterConcurrency <= 0 {
		cfg.RegisterConcurrency = 32
	}
	return &fleet{cfg: cfg}
}

// fleetWorkerID names simulated worker i (from 1).
func fleetWorkerID(i int) string { return fmt.Sprintf("sim%05d", i) }

// Size is the number of workers started (stopped ones included).
func (f *fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.workers)
}

// Grow starts workers until the fleet holds n, each registered before
// Grow returns. It returns the first failure (a certificate, a client, a
// registration, ctx ending), and only once every registration it started
// has ended; the workers registered meanwhile keep running. ctx bounds the
// registrations; the workers run until Close or Stop.
func (f *fleet) Grow(ctx context.Context, n int) error {
	from := f.Size()
	if n <= from {
		return nil
	}
	ids := make([]string, 0, n-from)
	for i := from + 1; i <= n; i++ {
		ids = append(ids, fleetWorkerID(i))
	}
	if f.cfg.TLSDir != "" {
		certs := make([]mtls.Cert, len(ids))
		for i, id := range ids {
			certs[i] = mtls.Cert{Name: id, Role: mtls.RoleWorker}
		}
		if err := mtls.IssueCerts(f.cfg.TLSDir, certs, nil, 24*time.Hour); err != nil {
			return fmt.Errorf("fleet: certificates: %w", err)
		}
	}
	sem := make(chan struct{}, f.cfg.RegisterConcurrency)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	for k, id := range ids {
		w, err := f.newWorker(id, from+k)
		if err != nil {
			wg.Wait()
			return err
		}
		f.mu.Lock()
		f.workers = append(f.workers, w)
		f.mu.Unlock()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f.register(ctx, w); err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("fleet: register %s: %w", w.id, err)
				}
				errMu.Unlock()
				return
			}
			f.start(w)
		}()
	}
	wg.Wait()
	return firstErr
}

// newWorker makes worker id's client: its certificate, and a dialer bound
// to the source address of slot i.
func (f *fleet) newWorker(id string, i int) (*simWorker, error) {
	var tc *tls.Config
	if f.cfg.TLSDir != "" {
		var err error
		if tc, err = mtls.FilesFor(f.cfg.TLSDir, id).Load(); err != nil {
			return nil, fmt.Errorf("fleet: %s: %w", id, err)
		}
	}
	g := i / f.cfg.PerSourceAddr
	src := net.IPv4(127, 77, byte(g/250), byte(g%250+1))
	d := &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: src},
		// IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect time
		// per destination, so the fleet's sockets do not take ports from
		// the machine's shared ephemeral range per bind.
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1) })
			return errors.Join(err, serr)
		},
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	c, err := f.newClient(tc, dial, f.cfg.Addrs)
	if err != nil {
		return nil, err
	}
	return &simWorker{id: id, client: c, tls: tc, dial: dial, addrs: f.cfg.Addrs, done: make(chan struct{})}, nil
}

// newClient makes a worker's client of the replicas addrs (the believed
// leader first).
func (f *fleet) newClient(tc *tls.Config, dial func(context.Context, string) (net.Conn, error), addrs []string) (*coordclient.Client, error) {
	cc := coordclient.DefaultConfig()
	cc.Addrs = addrs
	cc.TLS = tc
	cc.CallTimeout = max(5*f.cfg.Interval, 5*time.Second)
	cc.Dial = dial
	return coordclient.New(cc)
}

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (linux/in.h), which the
// syscall package does not name.
const ipBindAddressNoPort = 24

func (f *fleet) register(ctx context.Context, w *simWorker) error {
	if _, err := w.client.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w.id}); err != nil {
		return err
	}
	w.lastOK.Store(time.Now().UnixNano())
	return nil
}

// start runs w's heartbeat loop until Stop or Close (not at all after
// Close).
func (f *fleet) start(w *simWorker) {
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		w.client.Close()
		return
	}
	w.cancel = cancel
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(w.done)
		defer func() { w.client.Close() }() // the client of the moment (followLeader replaces it)
		// The first heartbeat falls anywhere in the first interval, so the
		// fleet's heartbeats spread evenly in time.
		wait := time.Duration(rand.Int64N(int64(f.workerInterval(w))) + 1)
		for {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			f.heartbeat(ctx, w)
			wait = shortened(f.workerInterval(w), f.cfg.Jitter)
		}
	}()
}

// workerInterval is w's heartbeat interval before jitter: the longer of
// the workers' own and the one the last reply asked it.
func (f *fleet) workerInterval(w *simWorker) time.Duration {
	return max(f.cfg.Interval, time.Duration(w.askedMS.Load())*time.Millisecond)
}

// interval is the fleet's heartbeat interval before jitter as of its last
// answered heartbeat.
func (f *fleet) interval() time.Duration {
	return max(f.cfg.Interval, time.Duration(f.askedMS.Load())*time.Millisecond)
}

// shortened is d shortened by a random fraction of up to j (0..1).
func shortened(d time.Duration, j float64) time.Duration {
	if j <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 - j*rand.Float64()))
}

func (f *fleet) heartbeat(ctx context.Context, w *simWorker) {
	hctx, cancel := context.WithTimeout(ctx, max(5*f.workerInterval(w), 5*time.Second))
	defer cancel()
	resp, err := w.client.Heartbeat(hctx, &rolloutv1.HeartbeatRequest{WorkerId: w.id})
	if errors.Is(err, coordclient.ErrNotRegistered) {
		f.reregistered.Add(1)
		err = f.register(hctx, w)
	}
	if err != nil {
		if ctx.Err() == nil {
			f.hbErrors.Add(1)
		}
		// As rollout-worker: the next heartbeat after the own interval.
		w.askedMS.Store(0)
		return
	}
	if resp != nil {
		d, _ := askedInterval(resp)
		w.askedMS.Store(d.Milliseconds())
		f.askedMS.Store(d.Milliseconds())
		f.ttlMS.Store(int64(resp.GetTtlMs()))
		f.heartbeats.Add(1)
	}
	w.lastOK.Store(time.Now().UnixNano())
	f.followLeader(w)
}

// followLeader replaces w's client with one that holds a single connection,
// to the replica it now takes for the leader, when that moved since the
// client was made. A real worker's client keeps its connection to every
// replica it used; ten thousand simulated workers that each kept three
// would need 30,000 files, past the open-file limit of one process where
// the bench runs (20,000). The leader sees the same connection per worker
// either way.
func (f *fleet) followLeader(w *simWorker) {
	leader := w.client.Leader()
	if leader == w.addrs[0] {
		return
	}
	addrs := []string{leader}
	for _, a := range f.cfg.Addrs {
		if a != leader {
			addrs = append(addrs, a)
		}
	}
	c, err := f.newClient(w.tls, w.dial, addrs)
	if err != nil {
		return
	}
	w.client.Close()
	w.client, w.addrs = c, addrs
}

// askedInterval is the interval a heartbeat reply asks until the next one
// (HeartbeatResponse.next_heartbeat_ms, capped as rollout-worker caps it),
// and false when it asks none (a coordinator that predates the field, or
// a fleet small enough for the workers' own interval).
func askedInterval(resp *rolloutv1.HeartbeatResponse) (time.Duration, bool) {
	ms := min(resp.GetNextHeartbeatMs(), uint64(maxAskedHeartbeat/time.Millisecond))
	return time.Duration(ms) * time.Millisecond, ms > 0
}

// maxAskedHeartbeat is rollout-worker's cap on the interval a leader may
// ask (worker.maxAskedHeartbeat).
const maxAskedHeartbeat = 10 * time.Minute

// Stop stops worker id at once, as a SIGKILL would: no Deregister, its
// connection closed. It returns the time its last heartbeat (or register)
// was answered; false when no running worker has that id.
func (f *fleet) Stop(id string) (time.Time, bool) {
	f.mu.Lock()
	i := slices.IndexFunc(f.workers, func(w *simWorker) bool { return w.id == id })
	var (
		w      *simWorker
		cancel context.CancelFunc
	)
	if i >= 0 {
		w, cancel = f.workers[i], f.workers[i].cancel
	}
	f.mu.Unlock()
	if cancel == nil {
		return time.Time{}, false
	}
	cancel()
	<-w.done
	return time.Unix(0, w.lastOK.Load()), true
}

// Heartbeating reports whether id is one of the fleet's workers and still
// runs (registered, not stopped).
func (f *fleet) Heartbeating(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.workers {
		if w.id == id {
			select {
			case <-w.done:
				return false
			default:
				return w.cancel != nil
			}
		}
	}
	return false
}

// fleetCounts is a snapshot of a fleet's counters.
type fleetCounts struct {
	Heartbeats, Errors, Reregistered int64
	// Interval is the heartbeat interval in force.
	Interval time.Duration
	// Asked says whether a reply asked for it.
	Asked bool
	// TTL is the TTL the last answered heartbeat announced (0: none).
	TTL time.Duration
}

func (f *fleet) Counts() fleetCounts {
	return fleetCounts{Heartbeats: f.heartbeats.Load(), Errors: f.hbErrors.Load(), Reregistered: f.reregistered.Load(),
		Interval: f.interval(), Asked: f.askedMS.Load() > 0, TTL: time.Duration(f.ttlMS.Load()) * time.Millisecond}
}

// Close stops every worker (no Deregister: the cluster goes away with
// them) and waits for their loops to end.
func (f *fleet) Close() {
	f.mu.Lock()
	f.closed = true
	var cancels []context.CancelFunc
	var idle []*simWorker
	for _, w := range f.workers {
		if w.cancel != nil {
			cancels = append(cancels, w.cancel)
		} else {
			idle = append(idle, w)
		}
	}
	f.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	for _, w := range idle {
		w.client.Close()
	}
	f.wg.Wait()
}
