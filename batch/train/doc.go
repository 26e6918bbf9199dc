// Package train is the front door of training runs: the train.toml config
// (Config, ParseConfig, LoadConfig), the digits data set and its fixed
// held-out split (LoadDigits), the plan that turns a config into ledger
// items with dependencies (Plan), and the formats of those items' payloads
// and results (DecodePayload, DecodeResult, StepsFromResults). It is pure
// and I/O-light like package batch: no gRPC, no coordinator; the CLI
// submits a Plan's items and the worker backend (worker/train) runs them.
//
// # A training run as items
//
// A run of S shards per step and K steps is 1+K·(S+1) items of RunSpec.kind
// "train" (Kind), with deterministic ids (blake3 of the run name and the
// item's role: InitID, ShardID, ReduceID) and indexes:
//
//   - init (index 0, no dependencies): weights version 0 from the seed
//     (mlp.Config.Init).
//   - step k's shard s (index 1+(k-1)(S+1)+s; depends on the item of
//     weights version k-1): the gradient of its samples' summed loss at
//     weights k-1. Its payload carries the samples (see Plan for how they
//     are drawn from the seed).
//   - step k's reduce (index 1+(k-1)(S+1)+S; depends on the item of
//     weights version k-1, then shards 0..S-1 in order): sums the shard
//     gradients in shard order, takes one SGD step of learning_rate/B
//     (B the batch size) and yields weights version k, named by its blake3
//     (mlp.Hash). On every checkpoint_interval-th step and the last, its
//     payload also carries the held-out set and its result the held-out
//     loss and accuracy of weights k.
//
// Because every item's inputs are fixed by its payload and its
// dependencies' results, and each result is recorded once in the ledger,
// a run resumed after any failure computes the same weights as one that
// never stopped (on a deterministic device: the cpu one).
//
// # Payloads and results
//
// Payloads and results are JSON objects starting with "v" (PayloadVersion)
// and "role" (init, shard, reduce); float32 vectors (features, weights,
// gradients) are little-endian float32 bytes in standard base64; labels
// one byte each. See InitPayload, ShardPayload, ReducePayload,
// WeightsResult and ShardResult for the fields.
//
// # Sizes
//
// The ledger takes results and payloads of at most 1 MiB each
// (limits.Default). A result holds one float32 vector of the
// model's parameter count P in base64 plus at most ResultOverheadBytes, so
// its size is at most 4·⌈4P/3⌉+1024 bytes: P up to about 196,000
// parameters. A payload holds one shard's samples or the held-out set.
// A reduce item is claimed with its S+1 dependencies' results, which must
// fit in one gRPC message. ParseConfig refuses a config over any of these
// bounds, naming the numbers (CheckLimits).
//
// # Data
//
// The digits data set (1,797 8×8 images of 0..16, labels 0..9) comes from
// Debian's python3-sklearn package: `make data` downloads the package with
// apt-get download, extracts it with dpkg -x (nothing is installed) and
// keeps sklearn/datasets/data/digits.csv.gz in .data/. Features are the
// pixel values divided by 16. The held-out split is fixed: sample i of the
// file (0-based) is held out when i mod 5 = 4 (359 samples); the other
// 1,438 train.
package train
