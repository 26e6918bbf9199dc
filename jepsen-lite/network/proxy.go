package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/freeport"
)

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Replicas and Workers name the nodes.
	Replicas, Workers []string
	// Logger receives connection errors. Nil discards them.
	Logger hclog.Logger
}

// DefaultProxyConfig returns a config with no nodes.
func DefaultProxyConfig() ProxyConfig { return ProxyConfig{} }

// Validate reports the first problem with c.
func (c ProxyConfig) Validate() error {
	if len(c.Replicas) == 0 {
		return fmt.Errorf("%w: Replicas is empty", ErrInvalidConfig)
	}
	if err := checkNodes("Replicas", c.Replicas); err != nil {
		return err
	}
	if err := checkNodes("Workers", c.Workers); err != nil {
		return err
	}
	for _, r := range c.Replicas {
		if slices.Contains(c.Workers, r) {
			return fmt.Errorf("%w: %q is both a replica and a worker", ErrInvalidConfig, r)
		}
	}
	return nil
}

// Proxy is the user-space network: every replica listens on loopback and
// advertises the address of a proxy in front of it (one for Raft, one for
// gRPC). For each connection the proxy finds the connecting process (its
// socket in /proc/net/tcp and the process holding it, among the processes
// SetProcesses names) and forwards each direction unless that link is cut;
// a cut direction's bytes wait in the proxy and the kernel buffers until it
// heals. Connections from unknown processes (the harness) are never cut.
type Proxy struct {
	cfg   ProxyConfig
	log   hclog.Logger
	nodes []string

	mu        sync.Mutex
	replicas  map[string]*proxied
	cut       map[Link]bool
	changed   chan struct{} // closed and replaced whenever cut changes or on Close
	processes func() map[int]string
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// proxied is one replica's real and advertised addresses.
type proxied struct {
	raftReal, grpcReal string
	raftLn, grpcLn     net.Listener
}

var _ localcluster.Placement = (*Proxy)(nil)

// NewProxy picks loopback ports for every replica and starts its proxies.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	p := &Proxy{
		cfg: cfg, log: cfg.Logger.Named("proxy"), replicas: map[string]*proxied{}, cut: map[Link]bool{},
		changed: make(chan struct{}), conns: map[net.Conn]struct{}{},
		nodes: append(slices.Clone(cfg.Replicas), cfg.Workers...),
	}
	ports, err := freeport.Ports(2 * len(cfg.Replicas))
	if err != nil {
		return nil, err
	}
	for i, r := range cfg.Replicas {
		px := &proxied{raftReal: loop(ports[2*i]), grpcReal: loop(ports[2*i+1])}
		for _, l := range []struct {
			ln   *net.Listener
			real string
		}{{&px.raftLn, px.raftReal}, {&px.grpcLn, px.grpcReal}} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				_ = p.Close()
				return nil, fmt.Errorf("network: proxy for %s: %w", r, err)
			}
			*l.ln = ln
			p.wg.Add(1)
			go p.accept(ln, r, l.real)
		}
		p.replicas[r] = px
	}
	return p, nil
}

func loop(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// SetProcesses sets the function naming the live processes: pid -> node.
// The harness calls it once the cluster exists.
func (p *Proxy) SetProcesses(fn func() map[int]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.processes = fn
}

// Mode returns ModeProxy.
func (p *Proxy) Mode() Mode { return ModeProxy }

// ReplicaAddrs binds replica id to its loopback ports and advertises its
// proxies.
func (p *Proxy) ReplicaAddrs(id string) (localcluster.ReplicaAddrs, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	px, ok := p.replicas[id]
	if !ok || px.raftLn == nil || px.grpcLn == nil {
		return localcluster.ReplicaAddrs{}, fmt.Errorf("%w: replica %q", ErrUnknownNode, id)
	}
	return localcluster.ReplicaAddrs{
		RaftBind: px.raftReal, RaftAdvertise: px.raftLn.Addr().String(),
		GRPCBind: px.grpcReal, GRPCAdvertise: px.grpcLn.Addr().String(),
	}, nil
}

// Command runs bin directly.
func (p *Proxy) Command(_, bin string, args []string) []string {
	return append([]string{bin}, args...)
}

// Cut makes links the set of cut links, replacing the previous set: the
// bytes of each listed direction wait in the proxy until a later Cut or Heal
// leaves it out. Links from or to Ctl are refused.
func (p *Proxy) Cut(_ context.Context, links []Link) error {
	next := map[Link]bool{}
	for _, l := range links {
		if l.From == Ctl || l.To == Ctl {
			return fmt.Errorf("%w: link %s: the harness is never cut off", ErrInvalidConfig, l)
		}
		for _, n := range []string{l.From, l.To} {
			if !slices.Contains(p.nodes, n) {
				return fmt.Errorf("%w: %q", ErrUnknownNode, n)
			}
		}
		if l.From != l.To {
			next[l] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.cut = next
	close(p.changed)
	p.changed = make(chan struct{})
	if len(links) > 0 {
		p.log.Debug("cut", "links", describe(links))
	}
	return nil
}

// Heal restores every link.
func (p *Proxy) Heal(ctx context.Context) error { return p.Cut(ctx, nil) }

// Close stops the proxies and closes every proxied connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed)
	for _, px := range p.replicas {
		for _, ln := range []net.Listener{px.raftLn, px.grpcLn} {
			if ln != nil {
				ln.Close()
			}
		}
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept(ln net.Listener, dst, real string) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c, dst, real)
	}
}

// serve forwards one connection from an identified source to dst.
func (p *Proxy) serve(c net.Conn, dst, real string) {
	defer p.wg.Done()
	src := p.identify(c)
	up, err := net.DialTimeout("tcp", real, 2*time.Second)
	if err != nil {
		c.Close() // like a refused connection: the replica is down
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pump(up, c, src, dst); done <- struct{}{} }()
	go func() { p.pump(c, up, dst, src); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.untrack(c, up)
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// pump copies src to dst, holding each chunk while the link from -> to is
// cut.
func (p *Proxy) pump(dst, src net.Conn, from, to string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(from, to) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Trace("proxied connection ended", "from", from, "to", to, "error", err)
			}
			return
		}
	}
}

// wait blocks while from -> to is cut; it returns false once the proxy is
// closed. An unidentified source ("") is never cut.
func (p *Proxy) wait(from, to string) bool {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return false
		}
		if from == "" || to == "" || !p.cut[Link{from, to}] {
			p.mu.Unlock()
			return true
		}
		ch := p.changed
		p.mu.Unlock()
		<-ch
	}
}

// identify names the node whose process opened c ("" when unknown).
func (p *Proxy) identify(c net.Conn) string {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	inode := socketInode(ra.Port, la.Port)
	if inode == "" {
		return ""
	}
	p.mu.Lock()
	fn := p.processes
	p.mu.Unlock()
	if fn == nil {
		return ""
	}
	target := "socket:[" + inode + "]"
	for pid, name := range fn() {
		if holdsSocket(pid, target) {
			return name
		}
	}
	return ""
}

// socketInode finds, in /proc/net/tcp, the loopback socket with local port
// lport connected to remote port rport, and returns its inode.
func socketInode(lport, rport int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", lport)
	wantRem := fmt.Sprintf(":%04X", rport)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !strings.HasSuffix(fs[1], want) || !strings.HasSuffix(fs[2], wantRem) {
			continue
		}
		return fs[9]
	}
	return ""
}

// holdsSocket reports whether process pid has a file descriptor for target
// ("socket:[inode]").
func holdsSocket(pid int, target string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == target {
			return true
		}
	}
	return false
}
