package runs

import (
	"context"
	"fmt"
	"sync"

	"github.com/rollout/rollout/store"
)

// rangeUploads is how many range chunks a submit stores at once (their
// bytes are what it holds besides the input it reads).
const rangeUploads = 4

// uploader stores content-addressed chunks under one prefix on up to n
// goroutines at once. The first failure cancels the uploads still running
// and every later start answers it.
type uploader struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     *store.Store
	prefix string
	slots  chan struct{}
	wg     sync.WaitGroup

	mu               sync.Mutex
	err              error
	uploaded, reused int
	bytes            int64
}

// chunkUpload is one chunk being stored: wait for its key.
type chunkUpload struct {
	done chan struct{}
	key  string
	err  error
}

// wait returns once the chunk is stored (its key is then set) or failed.
func (u *chunkUpload) wait() error {
	<-u.done
	return u.err
}

func newUploader(ctx context.Context, st *store.Store, prefix string, n int) *uploader {
	ctx, cancel := context.WithCancel(ctx)
	return &uploader{ctx: ctx, cancel: cancel, st: st, prefix: prefix, slots: make(chan struct{}, n)}
}

// start stores data, the chunk of items first..first+n-1, once a slot is
// free. It returns the first failure of an earlier upload, or ctx's
// error, instead of starting.
func (up *uploader) start(data []byte, first, n uint64) (*chunkUpload, error) {
	select {
	case up.slots <- struct{}{}:
	case <-up.ctx.Done():
		return nil, up.failure()
	}
	if err := up.failed(); err != nil {
		<-up.slots
		return nil, err
	}
	u := &chunkUpload{done: make(chan struct{})}
	up.wg.Add(1)
	go func() {
		defer up.wg.Done()
		defer func() { <-up.slots }()
		defer close(u.done)
		key, _, uploaded, err := up.st.PutContent(up.ctx, up.prefix, data)
		up.mu.Lock()
		defer up.mu.Unlock()
		if err != nil {
			u.err = fmt.Errorf("storing the range chunk of items %d..%d (%d bytes): %w", first, first+n-1, len(data), err)
			if up.err == nil {
				up.err = u.err
				up.cancel()
			}
			return
		}
		u.key = key
		if uploaded {
			up.uploaded++
		} else {
			up.reused++
		}
		up.bytes += int64(len(data))
	}()
	return u, nil
}

// failed is the first upload's failure, or nil.
func (up *uploader) failed() error {
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.err
}

// failure is the first upload's failure, else ctx's error.
func (up *uploader) failure() error {
	if err := up.failed(); err != nil {
		return err
	}
	return up.ctx.Err()
}

// counts returns how many chunks were uploaded and how many were already
// stored, and their bytes (SubmitConfig.Chunks).
func (up *uploader) counts() (uploaded, reused int, bytes int64) {
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.uploaded, up.reused, up.bytes
}

// stop cancels the uploads still running and waits for them.
func (up *uploader) stop() {
	up.cancel()
	up.wg.Wait()
}
