package train

import (
	"context"
	"fmt"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/worker"
)

// guard is the device as one item sees it: before every kernel launch it
// refuses to go on when the item's term is older than the newest term seen
// (worker.ErrStaleItem) or the item's context is done.
type guard struct {
	gpu.Device
	ctx    context.Context
	term   uint64
	newest func() uint64
}

// check is the epoch guard: what is about to happen (a kernel's name)
// happens only for an item from the newest term.
func (g *guard) check(what string) error {
	if n := g.newest(); g.term < n {
		return fmt.Errorf("%w: the item came in a reply of term %d, the newest term seen is %d: %s refused",
			worker.ErrStaleItem, g.term, n, what)
	}
	return g.ctx.Err()
}

func (g *guard) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b gpu.Buffer, beta float32, c gpu.Buffer) error {
	if err := g.check("gemm launch"); err != nil {
		return err
	}
	return g.Device.Gemm(transA, transB, m, n, k, alpha, a, b, beta, c)
}

func (g *guard) BiasAct(act gpu.Activation, m, n int, x, bias gpu.Buffer) error {
	if err := g.check("bias_act launch"); err != nil {
		return err
	}
	return g.Device.BiasAct(act, m, n, x, bias)
}

func (g *guard) ActGrad(act gpu.Activation, n int, y, dy gpu.Buffer) error {
	if err := g.check("act_grad launch"); err != nil {
		return err
	}
	return g.Device.ActGrad(act, n, y, dy)
}

func (g *guard) SoftmaxXent(m, n int, logits, labels, loss, grad gpu.Buffer) error {
	if err := g.check("softmax_xent launch"); err != nil {
		return err
	}
	return g.Device.SoftmaxXent(m, n, logits, labels, loss, grad)
}

func (g *guard) ColSum(m, n int, x, out gpu.Buffer) error {
	if err := g.check("col_sum launch"); err != nil {
		return err
	}
	return g.Device.ColSum(m, n, x, out)
}

func (g *guard) SGD(n int, lr float32, w, gr gpu.Buffer) error {
	if err := g.check("sgd launch"); err != nil {
		return err
	}
	return g.Device.SGD(n, lr, w, gr)
}

// Close is not the item's to call: the device belongs to the Backend.
func (g *guard) Close() error { return nil }
