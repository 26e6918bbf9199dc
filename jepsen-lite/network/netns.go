package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/client/localcluster"
)

// Fixed addressing inside a run's namespaces. Every run has its own switch,
// so runs side by side reuse the subnet without meeting.
const (
	subnetPrefix = "10.213.0."
	ctlHost      = 2
	floodHost    = 3   // a second address of the harness's namespace: the flood nemesis' host
	replicaHost0 = 10  // c1 is .11
	workerHost0  = 100 // w1 is .101
	// RaftPort and GRPCPort are every replica's ports inside its namespace.
	RaftPort = 7000
	GRPCPort = 7001
)

// NetNSConfig configures a NetNS.
type NetNSConfig struct {
	// Prefix starts every namespace name (PREFIX-sw, PREFIX-ctl,
	// PREFIX-c1, ...): 2-12 of a-z, 0-9. Namespaces with the prefix that a
	// crashed run left behind are deleted by CreateNetNS.
	Prefix string
	// Replicas and Workers name the nodes ("c1", ..., "w1", ...); replica
	// i (from 0) gets 10.213.0.(11+i), worker j 10.213.0.(101+j), the
	// harness 10.213.0.2.
	Replicas, Workers []string
	// Firewall is "nft" or "iptables"; empty picks the first installed.
	Firewall string
	// Logger receives the commands' failures. Nil discards them.
	Logger hclog.Logger
}

// DefaultNetNSConfig returns a config with the prefix "jl" and no nodes.
func DefaultNetNSConfig() NetNSConfig { return NetNSConfig{Prefix: "jl"} }

// Validate reports the first problem with c.
func (c NetNSConfig) Validate() error {
	if len(c.Prefix) < 2 || len(c.Prefix) > 12 || strings.ContainsFunc(c.Prefix, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		return fmt.Errorf("%w: Prefix %q must be 2-12 of a-z, 0-9", ErrInvalidConfig, c.Prefix)
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
	if len(c.Replicas) == 0 || len(c.Replicas) > workerHost0-replicaHost0-1 {
		return fmt.Errorf("%w: Replicas must name 1..%d nodes, got %d", ErrInvalidConfig, workerHost0-replicaHost0-1, len(c.Replicas))
	}
	if len(c.Workers) > 150 {
		return fmt.Errorf("%w: Workers must name at most 150 nodes, got %d", ErrInvalidConfig, len(c.Workers))
	}
	switch c.Firewall {
	case "", "nft", "iptables":
	default:
		return fmt.Errorf("%w: Firewall %q: want nft or iptables", ErrInvalidConfig, c.Firewall)
	}
	return nil
}

// NetNS is the namespace network. Its methods are safe for concurrent use.
type NetNS struct {
	cfg   NetNSConfig
	log   hclog.Logger
	ips   map[string]string // node -> IP
	nodes []string          // replicas then workers

	mu     sync.Mutex
	rules  map[string][]string // node -> destination IPs dropped now
	closed bool
}

var _ localcluster.Placement = (*NetNS)(nil)

// FirewallAvailable returns the firewall tool NetNS would use ("nft" or
// "iptables"), or ErrNoFirewall.
func FirewallAvailable() (string, error) {
	for _, t := range []string{"nft", "iptables"} {
		if _, err := exec.LookPath(t); err == nil {
			return t, nil
		}
	}
	return "", ErrNoFirewall
}

// CanNetNS reports whether this process can build a NetNS (root, ip and a
// firewall tool installed), and if not, why.
func CanNetNS() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("network: iproute2's ip is not installed: %w", err)
	}
	_, err := FirewallAvailable()
	return err
}

func newNetNS(cfg NetNSConfig) (*NetNS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Firewall == "" {
		fw, err := FirewallAvailable()
		if err != nil {
			return nil, err
		}
		cfg.Firewall = fw
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	n := &NetNS{cfg: cfg, log: cfg.Logger.Named("netns"), ips: map[string]string{Ctl: subnetPrefix + strconv.Itoa(ctlHost)}, rules: map[string][]string{}}
	for i, r := range cfg.Replicas {
		n.ips[r] = subnetPrefix + strconv.Itoa(replicaHost0+1+i)
		n.nodes = append(n.nodes, r)
	}
	for j, w := range cfg.Workers {
		n.ips[w] = subnetPrefix + strconv.Itoa(workerHost0+1+j)
		n.nodes = append(n.nodes, w)
	}
	return n, nil
}

// CreateNetNS deletes namespaces a previous run with the same prefix left
// behind, then creates the switch namespace with its bridge, one namespace
// per node and one for the harness (Namespace(Ctl)), each connected to the
// bridge by a veth pair, and an empty firewall table in every node. On
// error everything created is deleted again.
func CreateNetNS(ctx context.Context, cfg NetNSConfig) (*NetNS, error) {
	if err := CanNetNS(); err != nil {
		return nil, err
	}
	n, err := newNetNS(cfg)
	if err != nil {
		return nil, err
	}
	if err := RemoveStale(ctx, cfg.Prefix); err != nil {
		return nil, err
	}
	if err := n.create(ctx); err != nil {
		_ = n.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return n, nil
}

// AttachNetNS returns a NetNS for namespaces another process created with
// CreateNetNS and the same cfg (the harness re-executed inside the control
// namespace uses it). It creates nothing.
func AttachNetNS(cfg NetNSConfig) (*NetNS, error) {
	n, err := newNetNS(cfg)
	if err != nil {
		return nil, err
	}
	for _, node := range append([]string{Ctl}, n.nodes...) {
		if _, err := os.Stat("/run/netns/" + n.Namespace(node)); err != nil {
			return nil, fmt.Errorf("network: namespace %s: %w", n.Namespace(node), err)
		}
	}
	return n, nil
}

// Namespace returns the namespace name of node (or of the switch, for
// "sw").
func (n *NetNS) Namespace(node string) string { return n.cfg.Prefix + "-" + node }

// IP returns node's address.
func (n *NetNS) IP(node string) (string, bool) {
	ip, ok := n.ips[node]
	return ip, ok
}

// FloodIP returns the second address of the harness's namespace, that
// the flood nemesis dials from.
func (n *NetNS) FloodIP() string { return subnetPrefix + strconv.Itoa(floodHost) }

// Mode returns ModeNetNS.
func (n *NetNS) Mode() Mode { return ModeNetNS }

// Firewall returns the firewall tool in use.
func (n *NetNS) Firewall() string { return n.cfg.Firewall }

// ReplicaAddrs places replica id at its namespace's address, ports RaftPort
// and GRPCPort.
func (n *NetNS) ReplicaAddrs(id string) (localcluster.ReplicaAddrs, error) {
	if !slices.Contains(n.cfg.Replicas, id) {
		return localcluster.ReplicaAddrs{}, fmt.Errorf("%w: replica %q", ErrUnknownNode, id)
	}
	ip := n.ips[id]
	return localcluster.ReplicaAddrs{
		RaftBind: net.JoinHostPort(ip, strconv.Itoa(RaftPort)),
		GRPCBind: net.JoinHostPort(ip, strconv.Itoa(GRPCPort)),
	}, nil
}

// Command runs bin in name's namespace. An unknown name runs in the
// harness's namespace.
func (n *NetNS) Command(name, bin string, args []string) []string {
	ns := n.Namespace(Ctl)
	if _, ok := n.ips[name]; ok {
		ns = n.Namespace(name)
	}
	return append([]string{"ip", "netns", "exec", ns, bin}, args...)
}

func (n *NetNS) create(ctx context.Context) error {
	sw := n.Namespace("sw")
	steps := [][]string{
		{"ip", "netns", "add", sw},
		{"ip", "-n", sw, "link", "set", "lo", "up"},
		{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", sw, "link", "set", "br0", "up"},
	}
	if err := run(ctx, nil, steps...); err != nil {
		return err
	}
	for _, node := range append([]string{Ctl}, n.nodes...) {
		ns, veth := n.Namespace(node), "v-"+node
		if err := run(ctx, nil,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", sw, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", sw, "link", "set", veth, "master", "br0"},
			[]string{"ip", "-n", sw, "link", "set", veth, "up"},
			[]string{"ip", "-n", ns, "addr", "add", n.ips[node] + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		); err != nil {
			return err
		}
		if node == Ctl {
			// A second address, that the flood nemesis comes from, so that
			// the replicas' per-address limits see it apart from the
			// harness's clients.
			if err := run(ctx, nil, []string{"ip", "-n", ns, "addr", "add", n.FloodIP() + "/24", "dev", "eth0"}); err != nil {
				return err
			}
			continue
		}
		if err := n.setRules(ctx, node, nil, true); err != nil {
			return err
		}
	}
	return nil
}

// Cut makes links the set of cut links, replacing the previous set: packets
// of each listed direction are dropped (by a rule in the sender's namespace)
// until a later Cut or Heal leaves it out. Links from or to Ctl are refused:
// the harness keeps its view of every node.
func (n *NetNS) Cut(ctx context.Context, links []Link) error {
	want := map[string][]string{}
	for _, l := range links {
		if l.From == Ctl || l.To == Ctl {
			return fmt.Errorf("%w: link %s: the harness is never cut off", ErrInvalidConfig, l)
		}
		if _, ok := n.ips[l.From]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNode, l.From)
		}
		ip, ok := n.ips[l.To]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNode, l.To)
		}
		if l.From != l.To && !slices.Contains(want[l.From], ip) {
			want[l.From] = append(want[l.From], ip)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	var errs []error
	for _, node := range n.nodes {
		w := want[node]
		sort.Strings(w)
		if slices.Equal(w, n.rules[node]) {
			continue
		}
		if err := n.setRules(ctx, node, w, false); err != nil {
			errs = append(errs, err)
			continue
		}
		n.rules[node] = w
	}
	if len(errs) == 0 && len(links) > 0 {
		n.log.Debug("cut", "links", describe(links))
	}
	return errors.Join(errs...)
}

// Heal removes every drop rule.
func (n *NetNS) Heal(ctx context.Context) error { return n.Cut(ctx, nil) }

// setRules makes node drop packets to ips (init creates the table first).
func (n *NetNS) setRules(ctx context.Context, node string, ips []string, init bool) error {
	ns := n.Namespace(node)
	exe := []string{"ip", "netns", "exec", ns}
	switch n.cfg.Firewall {
	case "nft":
		var script strings.Builder
		if init {
			script.WriteString("add table inet jepsen\n")
			script.WriteString("add chain inet jepsen out { type filter hook output priority 0; policy accept; }\n")
		}
		script.WriteString("flush chain inet jepsen out\n")
		if len(ips) > 0 {
			fmt.Fprintf(&script, "add rule inet jepsen out ip daddr { %s } drop\n", strings.Join(ips, ", "))
		}
		return run(ctx, []byte(script.String()), append(exe, "nft", "-f", "-"))
	default:
		steps := [][]string{append(exe, "iptables", "-w", "-F", "OUTPUT")}
		for _, ip := range ips {
			steps = append(steps, append(slices.Clone(exe), "iptables", "-w", "-A", "OUTPUT", "-d", ip, "-j", "DROP"))
		}
		return run(ctx, nil, steps...)
	}
}

// Close heals every link; later Cuts fail with ErrClosed. It does not
// delete the namespaces (see Destroy).
func (n *NetNS) Close() error {
	err := n.Heal(context.Background())
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Destroy kills every process left in the run's namespaces and deletes
// them (nodes, the harness's, the switch).
func (n *NetNS) Destroy(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	var names []string
	for _, node := range n.nodes {
		names = append(names, n.Namespace(node))
	}
	names = append(names, n.Namespace(Ctl), n.Namespace("sw"))
	return deleteNamespaces(ctx, names)
}

// RemoveStale deletes every namespace named PREFIX-* (left by a crashed run
// with the same prefix), killing the processes still in them first.
func RemoveStale(ctx context.Context, prefix string) error {
	names, err := listNamespaces(ctx)
	if err != nil {
		return err
	}
	var stale []string
	for _, name := range names {
		if strings.HasPrefix(name, prefix+"-") {
			stale = append(stale, name)
		}
	}
	return deleteNamespaces(ctx, stale)
}

// listNamespaces returns the names `ip netns list` shows.
func listNamespaces(ctx context.Context) ([]string, error) {
	out, err := output(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// deleteNamespaces kills the processes in each namespace (by pid) and
// deletes it; it keeps going past errors and returns them all.
func deleteNamespaces(ctx context.Context, names []string) error {
	var errs []error
	for _, name := range names {
		if _, err := os.Stat("/run/netns/" + name); err != nil {
			continue
		}
		for try := 0; try < 50; try++ {
			out, err := output(ctx, "ip", "netns", "pids", name)
			if err != nil {
				break
			}
			pids := strings.Fields(out)
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(20 * time.Millisecond) // the kernel reaps them; poll again
		}
		if err := run(ctx, nil, []string{"ip", "netns", "del", name}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run runs each command in order, the first with stdin (when not nil), and
// stops at the first failure.
func run(ctx context.Context, stdin []byte, cmds ...[]string) error {
	for i, argv := range cmds {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		if i == 0 && stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("network: %s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

func output(ctx context.Context, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("network: %s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
