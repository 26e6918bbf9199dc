package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Key-file errors.
var (
	// ErrKeyFile: the keys file could not be read or has a bad line (the
	// error names the file and line).
	ErrKeyFile = errors.New("gateway: bad keys file")
	// ErrKeyName: a key name is empty, too long or has characters other
	// than letters, digits, '.', '_' and '-'.
	ErrKeyName = errors.New("gateway: bad key name")
	// ErrKeyExists: AddKey was asked for a name the file already holds.
	ErrKeyExists = errors.New("gateway: key name already in the keys file")
	// ErrKeysEmptied: Reload found a keys file with nothing but blank space
	// (emptied, or caught mid-write) while keys are loaded; they stay.
	ErrKeysEmptied = errors.New("gateway: the keys file is empty")
	// ErrKeyPriority: a key's priority is not a whole number from
	// MinPriority to MaxPriority.
	ErrKeyPriority = errors.New("gateway: bad key priority")
)

// The priorities a key's batches may run at (the ledger's run priority:
// claims serve a higher priority first). A key without one submits at
// DefaultPriority.
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// CheckPriority reports whether p may be a key's priority (ErrKeyPriority).
func CheckPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%w: %d: a priority is %d (lowest) to %d (highest)", ErrKeyPriority, p, MinPriority, MaxPriority)
	}
	return nil
}

// Key is what a loaded API key stands for.
type Key struct {
	// Name owns what the key creates; it is also the tenant of the
	// key's batches in the ledger.
	Name string
	// Priority is the priority of the key's batches (DefaultPriority when
	// its line names none).
	Priority int
}

// KeyPrefix starts every key AddKey makes (OpenAI's start with "sk-").
const KeyPrefix = "sk-rollout-"

// maxKeyName bounds a key name; names go into object keys.
const maxKeyName = 64

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckKeyName reports whether name may name a key (ErrKeyName).
func CheckKeyName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrKeyName)
	case len(name) > maxKeyName:
		return fmt.Errorf("%w: %q is %d bytes, at most %d", ErrKeyName, name, len(name), maxKeyName)
	case !keyNameRE.MatchString(name):
		return fmt.Errorf("%w: %q: use letters, digits, '.', '_' and '-', starting with a letter or digit", ErrKeyName, name)
	}
	return nil
}

// Keys maps API keys to the names that own what they create. It holds only
// the SHA-256 of each key, as the keys file does: a line "NAME:HEX", where
// HEX is the hex SHA-256 of the key, optionally followed (after blank
// space) by settings of the form FIELD=VALUE; the one field is priority
// (MinPriority to MaxPriority, DefaultPriority when absent), so that a
// file written before priorities existed reads as it did. An unknown
// field is an error naming it. Blank lines and lines starting with '#'
// are skipped. Safe for concurrent use; Load replaces the set at once.
type Keys struct {
	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]Key
}

// LoadKeys reads the keys file at path.
func LoadKeys(path string) (*Keys, error) {
	k := &Keys{}
	if err := k.Load(path); err != nil {
		return nil, err
	}
	return k, nil
}

// Load reads the keys file at path and replaces the set; on any error the
// set is unchanged. A file with no key is valid (every request is then
// refused).
func (k *Keys) Load(path string) error {
	m, err := parseKeys(path)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.byHash = m
	k.mu.Unlock()
	return nil
}

// Reload reads the keys file at path again (on SIGHUP) and replaces the set,
// returning how many keys it holds now. On any error the loaded keys stay:
// an unreadable file or a bad line (ErrKeyFile, naming the file), and a
// file with nothing but blank space while keys are loaded (ErrKeysEmptied):
// a file truncated by mistake or caught mid-write must not lock every
// client out. To revoke every key on purpose, leave a comment line in the
// file (say "# no keys"): a file with comments and no key is taken, and
// every request is then refused.
func (k *Keys) Reload(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return k.Len(), fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if len(bytes.TrimSpace(b)) == 0 && k.Len() > 0 {
		return k.Len(), fmt.Errorf("%w: %s holds nothing (%d bytes of blank space); the %d loaded keys stay (to revoke every key, leave a comment line such as \"# no keys\" in it)",
			ErrKeysEmptied, path, len(b), k.Len())
	}
	if err := k.Load(path); err != nil {
		return k.Len(), err
	}
	return k.Len(), nil
}

// Len returns how many keys are loaded.
func (k *Keys) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.byHash)
}

// Lookup returns the name of key, or false when no loaded key matches.
func (k *Keys) Lookup(key string) (string, bool) {
	e, ok := k.Key(key)
	return e.Name, ok
}

// Key returns what key stands for (its name and priority), or false when
// no loaded key matches.
func (k *Keys) Key(key string) (Key, bool) {
	if key == "" {
		return Key{}, false
	}
	h := sha256.Sum256([]byte(key))
	k.mu.RLock()
	defer k.mu.RUnlock()
	e, ok := k.byHash[h]
	return e, ok
}

// parseSettings reads the FIELD=VALUE settings after a key's hash into e.
func parseSettings(e *Key, fields []string) error {
	seen := map[string]bool{}
	for _, f := range fields {
		name, val, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not a FIELD=VALUE setting (the one field is priority)", f)
		}
		if seen[name] {
			return fmt.Errorf("%s is set twice", name)
		}
		seen[name] = true
		switch name {
		case "priority":
			p, err := strconv.Atoi(val)
			if err != nil {
				return fmt.Errorf("%w: %q is not a whole number", ErrKeyPriority, val)
			}
			if err := CheckPriority(p); err != nil {
				return err
			}
			e.Priority = p
		default:
			return fmt.Errorf("unknown field %q (the one field is priority)", name)
		}
	}
	return nil
}

func parseKeys(path string) (map[[sha256.Size]byte]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	m := map[[sha256.Size]byte]Key{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: "+format, append([]any{ErrKeyFile, path, n}, args...)...)
		}
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, bad("want NAME:SHA256-HEX [priority=N]")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, bad("the hash of %q is missing", name)
		}
		sum := fields[0]
		if err := CheckKeyName(name); err != nil {
			return nil, bad("%v", err)
		}
		raw, err := hex.DecodeString(sum)
		if err != nil || len(raw) != sha256.Size {
			return nil, bad("the hash of %q is not %d hex digits", name, 2*sha256.Size)
		}
		if names[name] {
			return nil, bad("name %q appears twice", name)
		}
		var h [sha256.Size]byte
		copy(h[:], raw)
		if other, dup := m[h]; dup {
			return nil, bad("%q has the same key as %q", name, other.Name)
		}
		e := Key{Name: name, Priority: DefaultPriority}
		if err := parseSettings(&e, fields[1:]); err != nil {
			return nil, bad("key %q: %w", name, err)
		}
		names[name], m[h] = true, e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	return m, nil
}

// AddKey makes a new random key for name, appends its line to the keys file
// at path (created with mode 0600 when missing) and returns the key, which
// is stored nowhere else. The file must parse first, and must not hold name.
// The key's batches run at DefaultPriority (AddKeyWith sets another).
func AddKey(path, name string) (string, error) {
	return AddKeyWith(path, name, KeyOptions{})
}

// KeyOptions are the settings of a new key (AddKeyWith).
type KeyOptions struct {
	// Priority of the key's batches; 0 writes none (DefaultPriority).
	Priority int
}

// AddKeyWith is AddKey with the key's settings: a Priority other than 0
// is written on the key's line as priority=N (ErrKeyPriority outside
// MinPriority..MaxPriority).
func AddKeyWith(path, name string, opts KeyOptions) (string, error) {
	if err := CheckKeyName(name); err != nil {
		return "", err
	}
	if opts.Priority != 0 {
		if err := CheckPriority(opts.Priority); err != nil {
			return "", err
		}
	}
	m, err := parseKeys(path)
	switch {
	case errors.Is(err, ErrKeyFile) && errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	}
	for _, e := range m {
		if e.Name == name {
			return "", fmt.Errorf("%w: %q (%s)", ErrKeyExists, name, path)
		}
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("gateway: making a key: %w", err)
	}
	key := KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(key))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	line := name + ":" + hex.EncodeToString(h[:])
	if opts.Priority != 0 {
		line += " priority=" + strconv.Itoa(opts.Priority)
	}
	line += "\n"
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		// Start on a new line if the file does not end with one.
		last := make([]byte, 1)
		if r, err := os.Open(path); err == nil {
			if _, err := r.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
				line = "\n" + line
			}
			r.Close()
		}
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return "", fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	return key, nil
}
