#!/usr/bin/env bash
# deploy/docker/image.sh: what `make image` runs. It builds rollout's images from
# deploy/docker/Dockerfile offline (no registry is asked for anything):
#
#   1. the binaries on this host (CGO_ENABLED=0; rollout with -tags nocuda), checking
#      that rollout-coord and rollout are static;
#   2. a static versitygw (for the rollout-s3 image of the compose cluster);
#   3. a base image with this host's C library (GLIBC_BASE), for rollout-worker;
#   4. a build context holding only prebuilt/ and prebuilt-versitygw/ (the binaries,
#      /tmp, /etc/passwd and /etc/group naming 65532 nonroot, the host's CA bundle,
#      /data), and each target built from it with BIN_FROM=prebuilt, STATIC_BASE=scratch;
#   5. the images' sizes.
#
# Environment: GO (go), DOCKER (/usr/bin/docker), VERSION, REVISION, OUT (the work
# directory, bin/image), VERSITYGW_VERSION, IMAGES (the targets, default all four).
set -euo pipefail

GO=${GO:-go}
DOCKER=${DOCKER:-/usr/bin/docker}
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/bin/image}
VERSION=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
IMAGES=${IMAGES:-rollout-coord rollout-worker rollout rollout-s3}
GLIBC_BASE=rollout-base-glibc:local

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

# static BIN: true when BIN has no program interpreter (no dynamic loader).
static() { ! ldd "$1" >/dev/null 2>&1; }

# rootfs DIR: the files the scratch bases lack.
rootfs() {
	local d=$1
	mkdir -p "$d/rootfs/tmp" "$d/rootfs/etc/ssl/certs" "$d/data"
	chmod 1777 "$d/rootfs/tmp"
	chmod 0750 "$d/data"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n' >"$d/rootfs/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$d/rootfs/etc/group"
	if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
		cp /etc/ssl/certs/ca-certificates.crt "$d/rootfs/etc/ssl/certs/"
	else
		say "no /etc/ssl/certs/ca-certificates.crt on this host: the images will not verify https:// stores (install ca-certificates)"
	fi
}

"$DOCKER" info >/dev/null 2>&1 || die "no Docker daemon answers $DOCKER (make tools-docker starts one)"

ctx=$OUT/ctx
rm -rf "$ctx" "$OUT/base"
mkdir -p "$ctx/prebuilt/out" "$ctx/prebuilt-versitygw/out" "$OUT/base"

say "building the binaries ($VERSION)"
(cd "$root" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$ctx/prebuilt/out/" ./cmd/rollout-coord ./cmd/rollout-worker)
(cd "$root" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -tags nocuda -o "$ctx/prebuilt/out/" ./cmd/rollout)
for b in rollout-coord rollout; do
	static "$ctx/prebuilt/out/$b" || die "$b is dynamically linked: it would not run on a scratch base ($(ldd "$ctx/prebuilt/out/$b" | tr '\n' ' '))"
done
rootfs "$ctx/prebuilt"

if [ ! -x "$OUT/versitygw-$VERSITYGW_VERSION" ]; then
	say "building a static versitygw $VERSITYGW_VERSION"
	tmp=$(mktemp -d)
	(cd "$root" && CGO_ENABLED=0 GOBIN="$tmp" "$GO" install -trimpath -ldflags='-s -w' "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
	mv "$tmp/versitygw" "$OUT/versitygw-$VERSITYGW_VERSION"
	rm -rf "$tmp"
fi
static "$OUT/versitygw-$VERSITYGW_VERSION" || die "versitygw is dynamically linked"
cp "$OUT/versitygw-$VERSITYGW_VERSION" "$ctx/prebuilt-versitygw/out/versitygw"
rootfs "$ctx/prebuilt-versitygw"
mkdir -p "$ctx/prebuilt-versitygw/data/rollout"

# The glibc base: the loader and the C library the worker links (ldd), and the
# libraries libcuda needs beside them (libdl, libpthread, libm, librt), at the
# paths this host's loader has them.
say "making $GLIBC_BASE from this host's C library"
mapfile -t libs < <(ldd "$ctx/prebuilt/out/rollout-worker" | grep -o '/[^ ]*' | sort -u)
[ "${#libs[@]}" -gt 0 ] || die "ldd names no library of rollout-worker: is it static? It needs the C library for its GPU path"
libc=$(printf '%s\n' "${libs[@]}" | grep '/libc\.so\.6$' || true)
[ -n "$libc" ] || die "ldd names no libc.so.6 for rollout-worker"
for extra in libdl.so.2 libpthread.so.0 libm.so.6 librt.so.1; do
	[ -e "$(dirname "$libc")/$extra" ] && libs+=("$(dirname "$libc")/$extra")
done
for l in "${libs[@]}"; do
	mkdir -p "$OUT/base/root$(dirname "$l")"
	cp -L "$l" "$OUT/base/root$l"
done
printf 'FROM scratch\nCOPY root/ /\n' >"$OUT/base/Dockerfile"
DOCKER_BUILDKIT=1 "$DOCKER" build -q -t "$GLIBC_BASE" "$OUT/base" >/dev/null

for t in $IMAGES; do
	say "building $t:$VERSION"
	DOCKER_BUILDKIT=1 "$DOCKER" build -q -f "$root/deploy/docker/Dockerfile" --target "$t" \
		--build-arg BIN_FROM=prebuilt --build-arg STATIC_BASE=scratch --build-arg GLIBC_BASE="$GLIBC_BASE" \
		--build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg VERSITYGW_VERSION="$VERSITYGW_VERSION" \
		-t "$t:$VERSION" -t "$t:latest" "$ctx" >/dev/null
done

echo
echo "image sizes ($VERSION):"
for t in $IMAGES; do
	"$DOCKER" image inspect --format "{{.Size}}" "$t:$VERSION" | awk -v n="$t:$VERSION" '{printf "  %-34s %6.1f MB\n", n, $1/1e6}'
done
