// Package peers reads a coordinator's peers file (rollout-coord --peers,
// federation): the peer clusters this cluster may hand whole runs to, each
// with its name, its replicas' gRPC addresses, the TLS files this cluster
// presents to it and verifies it with, and the object stores its workers
// can reach.
//
// The file is TOML, one [[peer]] table per peer, in the order routing
// tries them:
//
//	[[peer]]
//	name     = "b"                                  # the peer's --cluster-name
//	coord    = ["10.0.0.1:7000", "10.0.0.2:7000"]   # its replicas (host:port)
//	tls_ca   = "b-ca.pem"       # the peer's CA: verifies its replicas
//	tls_cert = "a-at-b.pem"     # role peer, CN = this cluster's name, from the peer's CA
//	tls_key  = "a-at-b-key.pem"
//	stores   = ["s3://shared-bucket?region=eu-west-1"]  # store URLs its workers reach
//
// Decoding is strict: an unknown key, a key of the wrong type, a missing
// field, a bad name or address, two peers of one name, or TLS files that
// do not load are refused with an error wrapping ErrInvalid that names the
// file, the peer and the field. Relative TLS paths are relative to the
// file's directory. A Watcher re-reads the file on demand (SIGHUP): a file
// that does not load is refused and the previous one stays in use.
package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/rollout/rollout/internal/mtls"
)

// ErrInvalid is wrapped by every error of a peers file that does not
// read, decode or validate.
var ErrInvalid = errors.New("peers: invalid peers file")

// Peer is one [[peer]] table.
type Peer struct {
	// Name is the peer cluster's name (its --cluster-name, a DNS label).
	Name string
	// Coord are its replicas' gRPC addresses, host:port.
	Coord []string
	// TLSCA, TLSCert and TLSKey are absolute paths: the peer's CA bundle,
	// and the peer certificate (role peer, named after this cluster,
	// issued by the peer's CA) with its key.
	TLSCA, TLSCert, TLSKey string
	// Stores are the object store URLs the peer's workers can reach.
	Stores []string
}

// Files returns the peer's TLS files.
func (p Peer) Files() mtls.Files { return mtls.Files{CA: p.TLSCA, Cert: p.TLSCert, Key: p.TLSKey} }

// ReachesStore reports whether the peer's workers reach the store URL:
// store is listed, or empty (a run whose data is inline).
func (p Peer) ReachesStore(store string) bool {
	return store == "" || slices.Contains(p.Stores, store)
}

// File is a parsed peers file.
type File struct {
	// Path is the file it was read from.
	Path string
	// Peers in the file's order.
	Peers []Peer
}

// Peer returns the peer named name.
func (f *File) Peer(name string) (Peer, bool) {
	if f == nil {
		return Peer{}, false
	}
	for _, p := range f.Peers {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}

// Names returns the peers' names in the file's order.
func (f *File) Names() []string {
	if f == nil {
		return nil
	}
	out := make([]string, len(f.Peers))
	for i, p := range f.Peers {
		out[i] = p.Name
	}
	return out
}

// Load reads, decodes and validates the peers file at path for the
// cluster named self (no peer may bear self's name), and loads every
// peer's TLS files once to check them.
func Load(path, self string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	f, err := Parse(data, filepath.Dir(path), self)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	for _, p := range f.Peers {
		m, err := mtls.LoadMaterial(p.Files())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: peer %q: %v", ErrInvalid, path, p.Name, err)
		}
		id, err := mtls.IdentityOf(m.Leaf)
		if err != nil || id.Role != mtls.RolePeer || id.Name != self {
			return nil, fmt.Errorf("%w: %s: peer %q: tls_cert %s must be a peer certificate named %q (rollout certs --names %s:peer, from the peer's CA); it is %q with role %q",
				ErrInvalid, path, p.Name, p.TLSCert, self, self, id.Name, id.Role)
		}
	}
	return f, nil
}

// The keys of a [[peer]] table.
var peerKeys = []string{"name", "coord", "tls_ca", "tls_cert", "tls_key", "stores"}

// Parse decodes and validates a peers file's bytes; relative TLS paths are
// joined to dir; self is this cluster's name. It reads no TLS file.
func Parse(data []byte, dir, self string) (*File, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("%w: line %d column %d: %s", ErrInvalid, row, col, de.Error())
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for k := range doc {
		if k != "peer" {
			return nil, fmt.Errorf("%w: unknown key %q (the file holds [[peer]] tables only)", ErrInvalid, k)
		}
	}
	f := &File{}
	raw, ok := doc["peer"]
	if !ok {
		return f, nil
	}
	tables, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: peer must be an array of tables ([[peer]]), not %T", ErrInvalid, raw)
	}
	for i, t := range tables {
		m, ok := t.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: peer %d is not a table", ErrInvalid, i+1)
		}
		p, err := parsePeer(m, dir, self)
		if err != nil {
			return nil, fmt.Errorf("%w: peer %d%s: %v", ErrInvalid, i+1, nameSuffix(m), err)
		}
		if _, dup := f.Peer(p.Name); dup {
			return nil, fmt.Errorf("%w: peer %d: name %q is used by an earlier peer", ErrInvalid, i+1, p.Name)
		}
		f.Peers = append(f.Peers, p)
	}
	return f, nil
}

func nameSuffix(m map[string]any) string {
	if n, ok := m["name"].(string); ok {
		return fmt.Sprintf(" (%q)", n)
	}
	return ""
}

func parsePeer(m map[string]any, dir, self string) (Peer, error) {
	for k := range m {
		if !slices.Contains(peerKeys, k) {
			return Peer{}, fmt.Errorf("unknown key %q (want %v)", k, peerKeys)
		}
	}
	var p Peer
	var err error
	if p.Name, err = str(m, "name"); err != nil {
		return Peer{}, err
	}
	if err := mtls.CheckClusterName(p.Name); err != nil {
		return Peer{}, fmt.Errorf("name: %v", err)
	}
	if p.Name == self {
		return Peer{}, fmt.Errorf("name %q is this cluster's own name", p.Name)
	}
	if p.Coord, err = strs(m, "coord", true); err != nil {
		return Peer{}, err
	}
	for _, a := range p.Coord {
		if err := checkAddr(a); err != nil {
			return Peer{}, fmt.Errorf("coord %q: %v", a, err)
		}
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"tls_ca", &p.TLSCA}, {"tls_cert", &p.TLSCert}, {"tls_key", &p.TLSKey}} {
		v, err := str(m, f.key)
		if err != nil {
			return Peer{}, err
		}
		if !filepath.IsAbs(v) {
			v = filepath.Join(dir, v)
		}
		*f.dst = v
	}
	if p.Stores, err = strs(m, "stores", false); err != nil {
		return Peer{}, err
	}
	for _, s := range p.Stores {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" {
			return Peer{}, fmt.Errorf("stores: %q is not a store URL (want scheme://...)", s)
		}
	}
	return p, nil
}

// str returns the non-empty string m[key].
func str(m map[string]any, key string) (string, error) {
	v, ok := m[key]
	if !ok {
		return "", fmt.Errorf("%s is missing", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %T", key, v)
	}
	if s == "" {
		return "", fmt.Errorf("%s is empty", key)
	}
	return s, nil
}

// strs returns the list of non-empty, distinct strings m[key]; required:
// it must be present and non-empty.
func strs(m map[string]any, key string, required bool) ([]string, error) {
	v, ok := m[key]
	if !ok {
		if required {
			return nil, fmt.Errorf("%s is missing", key)
		}
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a list of strings, not %T", key, v)
	}
	if required && len(list) == 0 {
		return nil, fmt.Errorf("%s is empty", key)
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("%s[%d] must be a non-empty string", key, i)
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("%s lists %q twice", key, s)
		}
		out = append(out, s)
	}
	return out, nil
}

func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" {
		return errors.New("no host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not 1 to 65535", port)
	}
	return nil
}

// Watcher holds the current peers file and re-reads it on Reload.
type Watcher struct {
	path, self string
	cur        atomic.Pointer[File]
	version    atomic.Uint64
}

// NewWatcher loads path (for the cluster named self) and returns a
// Watcher serving it; a first load that fails is an error.
func NewWatcher(path, self string) (*Watcher, error) {
	f, err := Load(path, self)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, self: self}
	w.cur.Store(f)
	w.version.Store(1)
	return w, nil
}

// Current returns the file in use.
func (w *Watcher) Current() *File { return w.cur.Load() }

// Version counts the loads taken (1 after NewWatcher).
func (w *Watcher) Version() uint64 { return w.version.Load() }

// Reload re-reads the file. A file that does not load is refused (the
// error wraps ErrInvalid) and the current one stays.
func (w *Watcher) Reload() error {
	f, err := Load(w.path, w.self)
	if err != nil {
		return err
	}
	w.cur.Store(f)
	w.version.Add(1)
	return nil
}

// ReloadOn reloads on every value of ch (SIGHUP) until ctx ends, telling
// warn of a refused file and info of a taken one.
func (w *Watcher) ReloadOn(ctx context.Context, ch <-chan os.Signal, info, warn func(msg string, args ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if err := w.Reload(); err != nil {
				warn("peers file refused on reload; the previous one stays in use", "path", w.path, "error", err)
				continue
			}
			info("peers file reloaded", "path", w.path, "peers", w.Current().Names())
		}
	}
}
