// Package storeurl checks object-store URLs without opening them: the one
// validation of a run's store URL that the CLI, the workers and the
// coordinator's API edge share. It imports no storage library, so the
// coordinator (which never touches the data plane) can check what it records.
package storeurl

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// MaxBytes bounds a store URL.
const MaxBytes = 1024

// ErrInvalid is matched (errors.Is) by every error of Check.
var ErrInvalid = errors.New("invalid store URL")

// Schemes are the URL schemes a store may have.
var schemes = map[string]bool{"file": true, "s3": true, "gs": true, "azblob": true, "mem": true}

// secretParams are query parameters that would put a credential into the
// ledger, a log line or an event: refused. Credentials come from the
// environment's standard chain.
var secretParams = []string{"secret", "password", "passwd", "token", "access_key", "accesskey", "signature", "sig", "sas", "credential"}

// Check reports the first problem with raw as a run's store URL: empty,
// over MaxBytes, not a URL, a scheme other than file, s3, gs, azblob or mem,
// a user or password in it, a query parameter that looks like a credential,
// a file URL with a host or without an absolute path, or a bucket URL
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
		if !strings.HasPrefix(u.Path, "/") || u.Path == "/" {
			return bad("file URL %q needs an absolute directory other than /", Redact(raw))
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
