package gpu

import (
	"errors"
	"fmt"
)

// Errors returned (wrapped, with the detail) by every Device.
var (
	// ErrShape: a dimension is not positive, too large, or does not match
	// a buffer's length.
	ErrShape = errors.New("gpu: shape mismatch")
	// ErrBuffer: a buffer is nil, freed, or belongs to another device.
	ErrBuffer = errors.New("gpu: bad buffer")
	// ErrLabel: a SoftmaxXent label is not an integer in [0, n).
	ErrLabel = errors.New("gpu: label out of range")
	// ErrClosed: the device has been closed.
	ErrClosed = errors.New("gpu: device closed")
)

// MaxElems is the largest number of elements in one buffer or one matrix
// operand. Kernels index with 32-bit signed integers.
const MaxElems = 1<<31 - 1

// The Check functions validate a kernel's shape arguments against its
// buffers' lengths. They are shared by every Device so that all devices
// accept and refuse exactly the same calls. Every operand must have exactly
// the number of elements its shape names.

// CheckLen validates an element count for Alloc.
func CheckLen(n int) error {
	if n < 0 || n > MaxElems {
		return fmt.Errorf("%w: buffer length %d outside [0, %d]", ErrShape, n, MaxElems)
	}
	return nil
}

func checkDims(op string, dims ...int) error {
	prod := 1
	for _, d := range dims {
		if d <= 0 {
			return fmt.Errorf("%w: %s: dimension %d is not positive", ErrShape, op, d)
		}
		if d > MaxElems || prod > MaxElems/d {
			return fmt.Errorf("%w: %s: %v exceeds %d elements", ErrShape, op, dims, MaxElems)
		}
		prod *= d
	}
	return nil
}

func checkOperand(op, name string, got, rows, cols int) error {
	if got != rows*cols {
		return fmt.Errorf("%w: %s: %s has %d elements, want %d×%d = %d", ErrShape, op, name, got, rows, cols, rows*cols)
	}
	return nil
}

// CheckGemm validates Gemm's shapes against the lengths of a, b and c.
func CheckGemm(transA, transB bool, m, n, k, a, b, c int) error {
	if err := checkDims("gemm", m, k); err != nil {
		return err
	}
	if err := checkDims("gemm", k, n); err != nil {
		return err
	}
	if err := checkDims("gemm", m, n); err != nil {
		return err
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkOperand("gemm", "A", a, ar, ac); err != nil {
		return err
	}
	if err := checkOperand("gemm", "B", b, br, bc); err != nil {
		return err
	}
	return checkOperand("gemm", "C", c, m, n)
}

// CheckBiasAct validates BiasAct's arguments against the lengths of x and bias.
func CheckBiasAct(act Activation, m, n, x, bias int) error {
	if err := CheckActivation(act); err != nil {
		return err
	}
	if err := checkDims("biasact", m, n); err != nil {
		return err
	}
	if err := checkOperand("biasact", "x", x, m, n); err != nil {
		return err
	}
	return checkOperand("biasact", "bias", bias, 1, n)
}

// CheckActGrad validates ActGrad's arguments against the lengths of y and dy.
func CheckActGrad(act Activation, n, y, dy int) error {
	if err := CheckActivation(act); err != nil {
		return err
	}
	if err := checkDims("actgrad", n); err != nil {
		return err
	}
	if err := checkOperand("actgrad", "y", y, 1, n); err != nil {
		return err
	}
	return checkOperand("actgrad", "dy", dy, 1, n)
}

// CheckSoftmaxXent validates SoftmaxXent's shapes against its buffers' lengths
// (the labels' values are checked by the device).
func CheckSoftmaxXent(m, n, logits, labels, loss, grad int) error {
	if err := checkDims("softmaxxent", m, n); err != nil {
		return err
	}
	if err := checkOperand("softmaxxent", "logits", logits, m, n); err != nil {
		return err
	}
	if err := checkOperand("softmaxxent", "labels", labels, m, 1); err != nil {
		return err
	}
	if err := checkOperand("softmaxxent", "loss", loss, m, 1); err != nil {
		return err
	}
	return checkOperand("softmaxxent", "grad", grad, m, n)
}

// CheckColSum validates ColSum's shapes against the lengths of x and out.
func CheckColSum(m, n, x, out int) error {
	if err := checkDims("colsum", m, n); err != nil {
		return err
	}
	if err := checkOperand("colsum", "x", x, m, n); err != nil {
		return err
	}
	return checkOperand("colsum", "out", out, 1, n)
}

// CheckSGD validates SGD's arguments against the lengths of w and g.
func CheckSGD(n int, lr float32, w, g int) error {
	if err := checkDims("sgd", n); err != nil {
		return err
	}
	if err := checkOperand("sgd", "w", w, 1, n); err != nil {
		return err
	}
	return checkOperand("sgd", "g", g, 1, n)
}

// CheckActivation refuses an unknown Activation.
func CheckActivation(act Activation) error {
	switch act {
	case ActIdentity, ActReLU, ActTanh:
		return nil
	}
	return fmt.Errorf("%w: unknown activation %d", ErrShape, act)
}

// String names the activation ("identity", "relu", "tanh").
func (a Activation) String() string {
	switch a {
	case ActIdentity:
		return "identity"
	case ActReLU:
		return "relu"
	case ActTanh:
		return "tanh"
	}
	return fmt.Sprintf("Activation(%d)", uint8(a))
}

// CheckLabel refuses a label that is not an integer in [0, n); row names
// the row for the message.
func CheckLabel(row int, label float32, n int) error {
	if !(label >= 0 && label < float32(n)) || label != float32(int(label)) {
		return fmt.Errorf("%w: row %d: label %v not an integer in [0, %d)", ErrLabel, row, label, n)
	}
	return nil
}
