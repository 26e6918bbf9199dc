package storeurl

import (
	"net/url"
	"path"
	"strings"
)

// A store URL has many spellings: file:///srv/store, file:///srv/store/,
// file:///srv//store, file:///srv/./store and file:///srv/store?x=1 all
// name one directory. Two forms settle which store a URL names:
//
//   - Normalize gives the form a run records: it opens exactly the store
//     that raw opens, with the same options (store.Open uses it, so
//     Store.URL, and with it every RunSpec.store a client writes, is
//     normalised).
//   - Identity gives what two URLs are compared by: only what decides where
//     the bytes live. Two URLs with one identity name one store.
//
// Runs recorded before normalisation (or by a client that does not
// normalise) hold other spellings, so a comparison always takes the
// Identity of both sides; nothing compares raw strings.
//
// Related answers the question identity cannot: whether two stores of
// different identities may still share bytes (one directory inside the
// other, one bucket through two endpoints or regions). A caller about to
// delete treats that as a question to its operator.

// droppedParams are, by scheme, the query parameters that change how a
// store is reached or what is written, never where the bytes live:
// credentials' sources (profile, role, anonymous, access_id,
// private_key_path), addressing (use_path_style, s3ForcePathStyle,
// hostname_immutable, protocol, disable_https, accelerate, dualstack, fips,
// cdn, grpc, zonal), the client (awssdk, rate_limiter_capacity, checksums,
// nomd5) and the encryption of writes (ssetype, kmskeyid). Identity drops
// them. Every other parameter (s3's endpoint and region, gs's
// universe_domain, azblob's storage_account, domain and localemu, the
// prefix and key every bucket URL but s3's takes, and any parameter this
// list does not know) may name another store and is kept. A file URL's
// query is dropped whole: store.Open reads none of it.
var droppedParams = map[string]map[string]bool{
	"s3": set("use_path_style", "s3ForcePathStyle", "hostname_immutable", "disable_https", "accelerate", "dualstack",
		"fips", "profile", "role", "anonymous", "awssdk", "rate_limiter_capacity",
		"request_checksum_calculation", "response_checksum_validation", "ssetype", "kmskeyid"),
	"gs":     set("access_id", "private_key_path", "anonymous", "grpc", "zonal"),
	"azblob": set("protocol", "cdn"),
	"mem":    set("nomd5"),
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// bucketSchemes name stores in a provider's bucket namespace: the same
// bucket name under two of them may be one bucket (GCS and most S3
// servers answer the S3 API at an endpoint).
var bucketSchemes = set("s3", "gs", "azblob")

// Normalize returns raw in the form a run records, or Check's error: the
// scheme lowercased; a file URL's directory cleaned (a trailing slash,
// "//", "/./" and ".." resolved, as store.Open resolves them) and its
// query dropped (store.Open reads none of it); a bucket URL's path
// dropped (its objects live at the bucket's root, whatever the path) and
// its query kept whole, sorted by parameter; no fragment. The result opens
// the same store, with the same options, as raw; Normalize of it is
// itself, and it passes Check.
func Normalize(raw string) (string, error) {
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	out := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.Scheme == "file" {
		out.Path = path.Clean(u.Path)
	} else {
		out.RawQuery = encodeQuery(u.Query())
	}
	return format(&out), nil
}

// Identity returns the identity of the store raw names, or Check's error:
// Normalize's form without the query parameters that do not change where
// the bytes live (droppedParams; an empty value counts as absent), an
// endpoint parameter's URL with its scheme and host lowercased, its
// default port and trailing slash dropped. Two URLs of one identity name
// the same store. Bucket names keep their case (an old S3 bucket's name
// may have capitals); Related matches them without it.
func Identity(raw string) (string, error) {
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	out := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.Scheme == "file" {
		out.Path = path.Clean(u.Path)
		return format(&out), nil
	}
	q := url.Values{}
	for k, vs := range u.Query() {
		if droppedParams[u.Scheme][k] {
			continue
		}
		for _, v := range vs {
			if v == "" {
				continue
			}
			if k == "endpoint" {
				v = normalizeEndpoint(v)
			}
			q.Add(k, v)
		}
	}
	out.RawQuery = encodeQuery(q)
	return format(&out), nil
}

// SameStore reports whether a and b name the same store: their identities
// are equal. A URL that Check refuses names no store and is the same as
// nothing.
func SameStore(a, b string) bool {
	ia, err := Identity(a)
	if err != nil {
		return false
	}
	ib, err := Identity(b)
	return err == nil && ia == ib
}

// Related reports whether a and b, two store URLs of different identities,
// may still share bytes, so that no one may conclude from their
// identities alone that an object of one is not an object of the other:
// two file directories one of which is, or is inside, the other; two
// bucket URLs (s3, gs, azblob) of the same bucket name, case aside (other
// endpoints, regions, prefixes or parameters of one bucket); two mem
// URLs. It is false when the identities are equal (the same store, no
// question) and when either URL is refused by Check.
func Related(a, b string) bool {
	ia, err := Identity(a)
	if err != nil {
		return false
	}
	ib, err := Identity(b)
	if err != nil || ia == ib {
		return false
	}
	ua, _ := url.Parse(ia)
	ub, _ := url.Parse(ib)
	switch {
	case ua.Scheme == "file" && ub.Scheme == "file":
		return within(ua.Path, ub.Path) || within(ub.Path, ua.Path)
	case ua.Scheme == "mem" && ub.Scheme == "mem":
		return true
	case bucketSchemes[ua.Scheme] && bucketSchemes[ub.Scheme]:
		return strings.EqualFold(ua.Host, ub.Host)
	}
	return false
}

// within reports whether the clean directory child is dir or inside it.
func within(child, dir string) bool {
	return child == dir || strings.HasPrefix(child, strings.TrimSuffix(dir, "/")+"/")
}

// parse checks raw and parses it.
func parse(raw string) (*url.URL, error) {
	if err := Check(raw); err != nil {
		return nil, err
	}
	return url.Parse(raw)
}

// format writes u as scheme://host/path?query, with the "//" even when
// the host and path are empty (mem://).
func format(u *url.URL) string {
	s := u.String()
	if p := u.Scheme + ":"; !strings.HasPrefix(s, p+"//") {
		s = p + "//" + strings.TrimPrefix(s, p)
	}
	return s
}

// encodeQuery is url.Values.Encode (sorted by parameter, values in
// their order) leaving ':' and '/' as they are, which a query may hold:
// endpoint=http://127.0.0.1:9000 stays readable.
func encodeQuery(q url.Values) string {
	return queryUnescaper.Replace(q.Encode())
}

var queryUnescaper = strings.NewReplacer("%3A", ":", "%2F", "/")

// normalizeEndpoint returns an endpoint URL with its scheme and host
// lowercased, the scheme's default port and a trailing slash dropped; a
// value that is not an absolute URL is returned as it is.
func normalizeEndpoint(v string) string {
	e, err := url.Parse(v)
	if err != nil || e.Scheme == "" || e.Host == "" || e.Opaque != "" {
		return v
	}
	e.Scheme = strings.ToLower(e.Scheme)
	e.Host = strings.ToLower(e.Host)
	if port := e.Port(); (e.Scheme == "http" && port == "80") || (e.Scheme == "https" && port == "443") {
		e.Host = strings.TrimSuffix(e.Host, ":"+port)
	}
	e.Path = strings.TrimRight(e.Path, "/")
	e.RawPath = ""
	e.Fragment, e.RawFragment = "", ""
	return e.String()
}
