package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

var (
	// errBadOwner means --owner is not UID or UID:GID in decimal.
	errBadOwner = errors.New("want UID or UID:GID, as numbers (e.g. 65532:65532)")
	// errOwnerNeedsRoot means --owner names another user than the
	// caller's and the caller is not root: only root may give files away.
	errOwnerNeedsRoot = errors.New("giving files to another user needs root")
)

// certOwner is --owner: the uid and gid the certificate directory and its
// files are given to (gid -1 keeps the group).
type certOwner struct {
	uid, gid int
}

// parseCertOwner parses UID or UID:GID (numbers: a container image has no
// user database to look names up in). The error matches errBadOwner.
func parseCertOwner(s string) (certOwner, error) {
	us, gs, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(us, 10, 31)
	if err != nil {
		return certOwner{}, fmt.Errorf("%q: %w", s, errBadOwner)
	}
	o := certOwner{uid: int(uid), gid: -1}
	if hasGID {
		gid, err := strconv.ParseUint(gs, 10, 31)
		if err != nil {
			return certOwner{}, fmt.Errorf("%q: %w", s, errBadOwner)
		}
		o.gid = int(gid)
	}
	return o, nil
}

// String is UID or UID:GID.
func (o certOwner) String() string {
	if o.gid < 0 {
		return strconv.Itoa(o.uid)
	}
	return fmt.Sprintf("%d:%d", o.uid, o.gid)
}

// check says, before anything is written, whether this process may give
// files to o: root may; anyone else only to its own uid and (when given)
// its own gid or one of its groups. The error matches errOwnerNeedsRoot.
func (o certOwner) check() error {
	euid := os.Geteuid()
	if euid == 0 {
		return nil
	}
	if o.uid != euid {
		return fmt.Errorf("--owner %s: %w (running as uid %d)", o, errOwnerNeedsRoot, euid)
	}
	if o.gid < 0 || o.gid == os.Getegid() {
		return nil
	}
	groups, err := os.Getgroups()
	if err == nil {
		for _, g := range groups {
			if g == o.gid {
				return nil
			}
		}
	}
	return fmt.Errorf("--owner %s: %w (gid %d is not one of this user's groups)", o, errOwnerNeedsRoot, o.gid)
}

// chownCertDir gives dir and every regular file directly in it (the CA,
// the certificates, the keys; never a link's target) to o, and sets the
// directory's mode to 0750 so that o's group may list it. The files keep
// their modes: private keys 0600 (readable by o only), certificates 0644.
func chownCertDir(dir string, o certOwner) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.Lchown(filepath.Join(dir, e.Name()), o.uid, o.gid); err != nil {
			return fmt.Errorf("--owner: %w", err)
		}
	}
	if err := os.Chown(dir, o.uid, o.gid); err != nil {
		return fmt.Errorf("--owner: %w", err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("--owner: %w", err)
	}
	return nil
}
