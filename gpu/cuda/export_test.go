//go:build (linux || darwin) && (amd64 || arm64)

package cuda

// LoadImage JIT-loads a raw PTX image on d (for the JIT error-log test).
func (d *Device) LoadImage(img []byte) error {
	return d.do(func() error { _, err := d.loadImage(img); return err })
}
