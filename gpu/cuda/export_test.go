//go:build (linux || darwin) && (amd64 || arm64)

package cuda

// LoadImage JIT-loads a raw PTX image on d (for the JIT error-log test).
func (d *Device) LoadImage(img []byte) error {
	return d.do(func() error { _, err := d.loadImage(img); return err })
}

// LoadDriver binds the driver library at path as Open does, and reports
// whether the optional cuGetErrorName was bound too.
func LoadDriver(path string) (errorNames bool, err error) {
	d, err := loadDriver(path)
	if err != nil {
		return false, err
	}
	return d.cuGetErrorName != nil, nil
}
