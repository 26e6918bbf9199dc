package storeurl

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIdentitySpellings: every spelling of one store has one identity and
// one normalised form; the normalised form keeps what opening needs.
func TestIdentitySpellings(t *testing.T) {
	for _, tt := range []struct {
		spellings     []string
		normal, ident string
	}{
		{[]string{
			"file:///srv/store", "file:///srv/store/", "file:///srv//store", "file:///srv/./store",
			"file:///srv/store?x=1", "file:///srv/store/?x=1&create_dir=1", "file:///srv/x/../store",
			"FILE:///srv/store", "file:/srv/store", "file:///srv/store#frag", "file:///srv/st%6Fre",
			"file://///srv///store///.",
		}, "file:///srv/store", "file:///srv/store"},
		{[]string{
			"s3://b?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true",
			"s3://b?use_path_style=true&region=us-east-1&endpoint=http://127.0.0.1:9000",
			"s3://b/?use_path_style=true&region=us-east-1&endpoint=http://127.0.0.1:9000",
			"s3://b/ignored/prefix?use_path_style=true&region=us-east-1&endpoint=http://127.0.0.1:9000",
		}, "s3://b?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true",
			"s3://b?endpoint=http://127.0.0.1:9000&region=us-east-1"},
		{[]string{
			"s3://b?endpoint=HTTP://Minio.local:80/&region=eu",
			"s3://b?endpoint=http://minio.local&region=eu&profile=p&ssetype=aws:kms&kmskeyid=k&s3ForcePathStyle=true",
			"s3://b?endpoint=http://minio.local/&region=eu&fips=",
		}, "", "s3://b?endpoint=http://minio.local&region=eu"},
		{[]string{"gs://b", "gs://b/", "gs://b?anonymous=true&grpc=1", "gs://b/x/y"}, "", "gs://b"},
		{[]string{"gs://b?prefix=a/", "gs://b?prefix=a/&access_id=x"}, "", "gs://b?prefix=a/"},
		{[]string{"azblob://c?storage_account=acct", "azblob://c?protocol=https&storage_account=acct"}, "",
			"azblob://c?storage_account=acct"},
		{[]string{"mem://", "mem:", "mem://?nomd5=1"}, "", "mem://"},
	} {
		for _, raw := range tt.spellings {
			id, err := Identity(raw)
			require.NoError(t, err, raw)
			require.Equal(t, tt.ident, id, raw)
			n, err := Normalize(raw)
			require.NoError(t, err, raw)
			if tt.normal != "" {
				require.Equal(t, tt.normal, n, raw)
			}
			nid, err := Identity(n)
			require.NoError(t, err)
			require.Equal(t, id, nid, "the normalised form keeps the identity of %s", raw)
			require.True(t, SameStore(raw, tt.spellings[0]), raw)
			require.False(t, Related(raw, tt.spellings[0]), "one store is not a question: %s", raw)
		}
	}
}

// TestIdentityDistinct: what changes where the bytes are changes the
// identity, and Related says which of those may still share bytes.
func TestIdentityDistinct(t *testing.T) {
	for _, tt := range []struct {
		a, b    string
		related bool
	}{
		{"file:///srv/store", "file:///srv/store/sub", true},
		{"file:///srv/store/runs/x", "file:///srv/store", true},
		{"file:///srv/store", "file:///srv/store2", false},
		{"file:///srv/a", "file:///srv/b", false},
		{"s3://b?region=us-east-1", "s3://b?region=cn-north-1", true},
		{"s3://b?endpoint=http://m1:9000", "s3://b?endpoint=http://m2:9000", true},
		{"s3://b", "s3://B", true},
		{"s3://b?x=1", "s3://b", true}, // an unknown parameter may name another store
		{"s3://b", "gs://b", true},
		{"gs://b?prefix=a/", "gs://b?prefix=b/", true},
		{"azblob://c?storage_account=one", "azblob://c?storage_account=two", true},
		{"s3://b", "s3://c", false},
		{"s3://b", "file:///b", false},
		{"mem://", "mem://?prefix=p/", true},
	} {
		require.False(t, SameStore(tt.a, tt.b), "%s vs %s", tt.a, tt.b)
		require.Equal(t, tt.related, Related(tt.a, tt.b), "%s vs %s", tt.a, tt.b)
		require.Equal(t, tt.related, Related(tt.b, tt.a), "%s vs %s", tt.b, tt.a)
	}
	require.False(t, Related("http://x", "http://x"), "refused URLs are related to nothing")
	require.False(t, SameStore("http://x", "http://x"), "refused URLs are the same as nothing")
	for _, bad := range []string{"file:///srv/..", "file:///./", "file:////", "http://x", ""} {
		_, err := Identity(bad)
		require.ErrorIs(t, err, ErrInvalid, bad)
		_, err = Normalize(bad)
		require.ErrorIs(t, err, ErrInvalid, bad)
	}
}

// FuzzNormalize: Normalize and Identity never panic; what Check accepts
// they accept, and what they return passes Check, is its own normal form
// and identity (idempotent), and keeps raw's identity; a trailing slash,
// a doubled slash, a "." segment or an unknown file parameter changes no
// identity.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"file:///srv/store", "file:///srv/store/", "file:///a//b/./c/..?x=1",
		"s3://b?endpoint=http://h:9000&region=r&use_path_style=true", "gs://b?prefix=p", "mem://",
		"azblob://c?storage_account=a", "s3://b%41", "file:///%2e%2e/x", "s3://b?endpoint=HTTP://H:80/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		n, nerr := Normalize(raw)
		id, ierr := Identity(raw)
		_ = Related(raw, "file:///srv/store")
		if Check(raw) != nil {
			require.Error(t, nerr)
			require.Error(t, ierr)
			return
		}
		require.NoError(t, nerr, raw)
		require.NoError(t, ierr, raw)
		require.NoError(t, Check(n), "normal form %q of %q", n, raw)
		require.NoError(t, Check(id), "identity %q of %q", id, raw)
		n2, err := Normalize(n)
		require.NoError(t, err)
		require.Equal(t, n, n2, "Normalize is idempotent on %q", raw)
		id2, err := Identity(id)
		require.NoError(t, err)
		require.Equal(t, id, id2, "Identity is idempotent on %q", raw)
		idn, err := Identity(n)
		require.NoError(t, err)
		require.Equal(t, id, idn, "the normal form of %q keeps its identity", raw)
		require.False(t, Related(raw, n))

		u, _ := url.Parse(n)
		if u.Scheme != "file" {
			return
		}
		for _, variant := range []string{n + "/", n + "/.", n + "?x=1", strings.Replace(n, "file:///", "file:////", 1)} {
			if Check(variant) != nil {
				continue // over the length limit
			}
			require.True(t, SameStore(raw, variant), "%q and %q", raw, variant)
		}
	})
}
