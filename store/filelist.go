package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// attrsExt ends the name of fileblob's sidecar file of an object's
// attributes: not an object.
const attrsExt = ".attrs"

// listFile lists a file:// store's objects under prefix, in key order,
// with the keys fileblob lists (the path under the root with fileblob's
// hex escapes undone; attribute sidecars and unfinished writes left out),
// except that a file or directory that goes away between the reading of
// its directory and the reading of its attributes is left out, as a
// listing a moment later would leave it out. fileblob fails the whole
// listing with a NotFound there ("listing runs/: object not found")
// whenever a writer renames its temporary file or a run's directory is
// removed while it walks: that is every listing of a busy store.
// A directory that cannot be read for another reason fails the listing
// (ErrUnavailable) rather than being skipped in silence.
func (s *Store) listFile(ctx context.Context, prefix string, fn func(Object) error) error {
	root := s.dir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = filepath.Join(s.dir, filepath.FromSlash(prefix[:i]))
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("listing %s: %w", prefix, err)
		}
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // gone, or never a directory: nothing under it
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w: %w", prefix, ErrUnavailable, err)
		}
		// In key order: a directory's keys all start with its key and a
		// "/", so it sorts as that.
		rel, err := filepath.Rel(s.dir, dir)
		if err != nil {
			return fmt.Errorf("listing %s: %w: %w", prefix, ErrUnavailable, err)
		}
		base := ""
		if rel != "." {
			base = hexUnescape(filepath.ToSlash(rel)) + "/"
		}
		keys := make(map[fs.DirEntry]string, len(entries))
		for _, e := range entries {
			k := base + hexUnescape(e.Name())
			if e.IsDir() {
				k += "/"
			}
			keys[e] = k
		}
		slices.SortStableFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(keys[a], keys[b]) })
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			key := strings.TrimSuffix(keys[e], "/")
			if e.IsDir() {
				// Only a directory on the way to prefix, or under it,
				// can hold a key with prefix.
				if d := key + "/"; strings.HasPrefix(d, prefix) || strings.HasPrefix(prefix, d) {
					if err := walk(path); err != nil {
						return err
					}
				}
				continue
			}
			if strings.HasSuffix(e.Name(), attrsExt) || !strings.HasPrefix(key, prefix) || isTemp(key) {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed or renamed since its directory was read
			}
			if err != nil {
				return fmt.Errorf("listing %s: %w: %w", prefix, ErrUnavailable, err)
			}
			if err := fn(Object{Key: key, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}

// hexUnescape undoes fileblob's escaping of a key into a path: each
// "__0xHEX__" is the rune of that code point (fileblob escapes control
// characters, a "/" after "..", a doubled or trailing "/").
func hexUnescape(s string) string {
	if !strings.Contains(s, "__0x") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "__0x") {
			rest := s[i+4:]
			if j := strings.IndexByte(rest, '_'); j >= 0 && strings.HasPrefix(rest[j:], "__") {
				if r, err := strconv.ParseInt(rest[:j], 16, 32); err == nil {
					b.WriteRune(rune(r))
					i += 4 + j + 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}
