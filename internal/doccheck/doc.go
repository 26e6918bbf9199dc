// Package doccheck holds the test of the repository's Markdown (run by make
// test); it has no code of its own. The test checks that:
//
//   - every relative link in README.md, docs/*.md and every other Markdown
//     file of the repository (outside hidden directories and node_modules)
//     names a file or directory that exists, and a #fragment names a heading
//     of its target (GitHub's anchor rules);
//   - every command a reader copies from a ```sh, ```bash, ```shell or
//     ```console block exists: `make TARGET` names a target of the Makefile,
//     and `rollout`, `rollout-coord` and `rollout-worker` (bare or as
//     bin/...) use only subcommands and flags that the binaries' own --help
//     lists (the binaries are built once for the test);
//   - every package of `go list ./...` appears in the package map of
//     docs/ARCHITECTURE.md;
//   - README.md has at most 200 lines (the quick start and a map of the
//     docs; reference belongs in docs/).
//
// Each failure names FILE:LINE and what is wrong.
package doccheck
