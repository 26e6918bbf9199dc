// Package storeurl checks object-store URLs without opening them: the one
// validation of a run's store URL that the CLI, the workers and the
// coordinator's API edge share. It imports no storage library, so the
// coordinator (which never touches the data plane) can check what it records.
package storeurl

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds a store URL.
const MaxBytes = 1024

// The package's errors, matched with errors.Is.
var (
	// ErrInvalid is matched by every error of Check.
	ErrInvalid = errors.New("invalid store URL")
	// ErrInvalidKey is matched by every error of CheckKey.
	ErrInvalidKey = errors.New("invalid object key")
)

// MaxKeyBytes bounds an object key.
const MaxKeyBytes = 1024

// CheckKey reports why key cannot name an object under a store's root:
// empty, over MaxKeyBytes, a leading '/', a backslash, a control character,
// or an empty, "." or ".." segment (so no key escapes the root).
func CheckKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrInvalidKey, key, why) }
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyBytes:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyBytes))
	case strings.HasPrefix(key, "/"):
		return bad("starts with /")
	case strings.ContainsRune(key, '\\'):
		return bad("contains a backslash")
	case !utf8.ValidString(key):
		return bad("is not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("has an empty, . or .. segment")
		}
	}
	return nil
}

// Schemes are the URL schemes a store may have.
var schemes = map[string]bool{"file": true, "s3": true, "gs": true, "azblob": true, "mem": true}

// secretParams are query parameters that would put a credential into the
// ledger, a log line or an event: refused. Credentials come from the
// environment's standard chain.
var secretParams = []string{"secret", "password", "passwd", "token", "access_key", "accesskey", "signature", "sig", "sas", "credential"}

// Check reports the first problem with raw as a run's store URL: empty,
// over MaxBytes, not a URL, a scheme other than file, s3, gs, azblob or mem,
// a user or password in it, a query parameter that looks like a credential,
// a file URL with a host or without an absolute path other than / (once
// "." and ".." are resolved), or a bucket URL
// without a bucket. A nil error means the URL may be recorded.
func Check(raw string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if raw == "" {
		return bad("empty")
	}
	if len(raw) > MaxBytes {
		return bad("%d bytes, over the limit of %d", len(raw), MaxBytes)
	}
	for _, r := range raw {
		if r < 0x20 || r == 0x7f {
			return bad("control character %U", r)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	if !schemes[u.Scheme] {
		return bad("scheme %q is not one of file, s3, gs, azblob, mem (in %q)", u.Scheme, Redact(raw))
	}
	if u.User != nil {
		return bad("it carries a user or password; credentials come from the environment, never the URL")
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			return bad("query parameter %q looks like a credential; credentials come from the environment, never the URL", k)
		}
		for _, v := range vs {
			if hasUserinfo(v) {
				return bad("query parameter %q carries a user or password; credentials come from the environment, never the URL", k)
			}
		}
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" {
			return bad("file URL %q has a host; use file:///absolute/dir", Redact(raw))
		}
		if !strings.HasPrefix(u.Path, "/") || path.Clean(u.Path) == "/" {
			return bad("file URL %q needs an absolute directory other than / (.. resolved)", Redact(raw))
		}
	case "mem":
	default:
		if u.Host == "" {
			return bad("%s URL %q names no bucket", u.Scheme, Redact(raw))
		}
	}
	return nil
}

// Redact returns raw without any user information and with every query
// value replaced by "REDACTED" where the parameter looks like a credential:
// safe for error messages and logs even when Check refused raw.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	q := u.Query()
	changed := false
	for k, vs := range q {
		if secretParam(k) || slices.ContainsFunc(vs, hasUserinfo) {
			q.Set(k, "REDACTED")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Key layout under a store's root: a run's own objects are under
// RunPrefix(run), its uploaded input chunks under InputPrefix(run), its
// result objects under ResultPrefix(run).
const (
	runsDir    = "runs/"
	inputsDir  = "inputs/"
	resultsDir = "results/"
)

// RunPrefix is "runs/NAME/", NAME path-escaped (a '/' in a run name is %2F,
// a leading '.' is %2E), so that no run name makes a key escape or
// collide with another run's.
func RunPrefix(run string) string {
	esc := url.PathEscape(run)
	if strings.HasPrefix(esc, ".") {
		esc = "%2E" + esc[1:]
	}
	return runsDir + esc + "/"
}

// InputPrefix is where a run's uploaded input chunks live.
func InputPrefix(run string) string { return RunPrefix(run) + inputsDir }

// ResultPrefix is where a run's result objects live.
func ResultPrefix(run string) string { return RunPrefix(run) + resultsDir }

// secretParam reports whether a query parameter's name looks like a
// credential's.
func secretParam(name string) bool {
	ln := strings.ToLower(name)
	for _, s := range secretParams {
		if strings.Contains(ln, s) {
			return true
		}
	}
	return false
}

// hasUserinfo reports whether a query value is a URL with a user or
// password in it (an endpoint=http://user:pass@host).
func hasUserinfo(v string) bool {
	if !strings.Contains(v, "@") {
		return false
	}
	u, err := url.Parse(v)
	return err != nil || u.User != nil
}

// ErrInvalidPrefix is matched by every error of CheckDataPrefix and
// ParseDataPrefix.
var ErrInvalidPrefix = errors.New("invalid data prefix")

// ClustersDir is where attributable run data lives: everything under
// ClustersDir + CLUSTER + "/" was written by the cluster of that identity.
const ClustersDir = "clusters/"

// idHexLen is the length of a cluster id and of a run's incarnation: 128
// bits as lowercase hex.
const idHexLen = 32

// CheckID reports why id is not a cluster id or an incarnation: 32
// lowercase hex digits.
func CheckID(what, id string) error {
	if len(id) != idHexLen {
		return fmt.Errorf("%w: %s %q is not %d lowercase hex digits", ErrInvalidPrefix, what, id, idHexLen)
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: %s %q is not %d lowercase hex digits", ErrInvalidPrefix, what, id, idHexLen)
		}
	}
	return nil
}

// ClusterPrefix is "clusters/CLUSTER/": every object a run of the cluster
// with identity cluster writes is under it.
func ClusterPrefix(cluster string) string { return ClustersDir + cluster + "/" }

// DataPrefix is the key prefix of one incarnation of run on cluster:
// "clusters/CLUSTER/runs/NAME/INCARNATION/", NAME escaped as RunPrefix
// escapes it. Two clusters, or two incarnations of one run name (deleted
// and submitted again), never share a prefix.
func DataPrefix(cluster, run, incarnation string) string {
	return ClusterPrefix(cluster) + RunPrefix(run) + incarnation + "/"
}

// ParseDataPrefix splits a DataPrefix into its cluster id, its escaped run
// name and its incarnation; an error (ErrInvalidPrefix) names what is wrong.
func ParseDataPrefix(p string) (cluster, escRun, incarnation string, err error) {
	bad := fmt.Errorf("%w: %q is not clusters/CLUSTER/runs/NAME/INCARNATION/", ErrInvalidPrefix, p)
	parts := strings.Split(p, "/")
	if len(parts) != 6 || parts[0]+"/" != ClustersDir || parts[2]+"/" != runsDir || parts[3] == "" || parts[5] != "" {
		return "", "", "", bad
	}
	if err := CheckID("cluster id", parts[1]); err != nil {
		return "", "", "", err
	}
	if err := CheckID("incarnation", parts[4]); err != nil {
		return "", "", "", err
	}
	return parts[1], parts[3], parts[4], nil
}

// CheckDataPrefix reports why p cannot be run's data prefix on the cluster
// with identity cluster: not a DataPrefix, another cluster's, or another
// run's.
func CheckDataPrefix(p, cluster, run string) error {
	c, esc, _, err := ParseDataPrefix(p)
	if err != nil {
		return err
	}
	if c != cluster {
		return fmt.Errorf("%w: %q belongs to cluster %s, this cluster is %q", ErrInvalidPrefix, p, c, cluster)
	}
	if want := strings.TrimSuffix(strings.TrimPrefix(RunPrefix(run), runsDir), "/"); esc != want {
		return fmt.Errorf("%w: %q names run %q, the run is %q", ErrInvalidPrefix, p, esc, want)
	}
	return nil
}

// RunData is the key prefix of a run's own objects: dataPrefix (the run's
// recorded RunSpec.data_prefix) or, for a run recorded without one,
// RunPrefix(run).
func RunData(run, dataPrefix string) string {
	if dataPrefix != "" {
		return dataPrefix
	}
	return RunPrefix(run)
}

// RunInputs is where the run's input chunks live: RunData + "inputs/".
func RunInputs(run, dataPrefix string) string { return RunData(run, dataPrefix) + inputsDir }

// RunResults is where the run's result objects live: RunData + "results/".
func RunResults(run, dataPrefix string) string { return RunData(run, dataPrefix) + resultsDir }

// ownedDirs are the top-level key prefixes whose objects belong to a run
// or a gateway: runs/ (runs before cluster identities), clusters/ (every
// cluster's runs) and gateway/ (a gateway's files, package gateway).
var ownedDirs = []string{runsDir, ClustersDir, "gateway/"}

// CheckPayloadKey reports why key may not be a payload_ref of a submit to
// run whose data prefix is dataPrefix (storeurl.RunData): a key under the
// run's input prefix is always allowed; with inPlace (a submit of items by
// id, which may reference an input already in the store where it is) so is
// a key outside runs/, clusters/ and gateway/, never another run's or a
// gateway's object. A range submit (inPlace false) references only its
// run's input prefix. The error names the key and the expected prefix.
func CheckPayloadKey(key, run, dataPrefix string, inPlace bool) error {
	want := RunInputs(run, dataPrefix)
	if strings.HasPrefix(key, want) {
		return nil
	}
	if inPlace {
		owned := false
		for _, d := range ownedDirs {
			owned = owned || strings.HasPrefix(key, d)
		}
		if !owned {
			return nil
		}
		return fmt.Errorf("payload_ref object %q is not under run %q's input prefix %q (an input referenced in place may be anywhere but under %s)",
			key, run, want, strings.Join(ownedDirs, ", "))
	}
	return fmt.Errorf("payload_ref object %q is not under run %q's input prefix %q", key, run, want)
}
