#!/usr/bin/env bash
# fetch-nvidia.sh DIR: puts NVIDIA's own ptxas (from Debian's non-free
# nvidia-cuda-toolkit) at DIR/bin/ptxas and NVIDIA's driver library (from
# libcuda1 and libnvidia-ptxjitcompiler1) at DIR/lib/libcuda.so.1, for
# `make gpu-check`. Nothing is installed: the packages are downloaded with
# `apt-get download` and unpacked with `dpkg -x`. The contrib and non-free
# components are made visible to apt through a private configuration under
# DIR/apt (its own sources, package lists and cache); the system's apt
# configuration is read, never changed. A second run with both files present
# does nothing. On failure it exits non-zero after saying why.
set -euo pipefail

dir=${1:?usage: fetch-nvidia.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -x "$dir/bin/ptxas" ] && [ -e "$dir/lib/libcuda.so.1" ]; then
	exit 0
fi
for tool in apt-get dpkg awk; do
	command -v "$tool" >/dev/null || { echo "fetch-nvidia: $tool is missing (Debian's apt and dpkg are needed)" >&2; exit 1; }
done

priv="$dir/apt"
rm -rf "$priv"
mkdir -p "$priv/lists/partial" "$priv/cache/archives/partial" "$priv/sources.list.d" "$priv/dl"

# The private sources: the system's Debian entries (those signed by the
# Debian archive keyring), with the contrib and non-free components added.
n=0
for f in /etc/apt/sources.list.d/*.sources; do
	[ -e "$f" ] || continue
	# deb822 stanzas are separated by blank lines; keep Debian's.
	awk 'BEGIN { RS=""; ORS="\n\n" }
	     /Signed-By:[^\n]*debian-archive/ {
	       gsub(/Components:[^\n]*/, "Components: main contrib non-free non-free-firmware"); print }' "$f" \
		>"$priv/sources.list.d/$(basename "$f")"
	[ -s "$priv/sources.list.d/$(basename "$f")" ] && n=$((n + 1))
done
if [ -e /etc/apt/sources.list ]; then
	awk '$1 == "deb" && $0 !~ /contrib/ { print $0 " contrib non-free non-free-firmware"; next } $1 == "deb" { print }' \
		/etc/apt/sources.list >"$priv/sources.list"
	[ -s "$priv/sources.list" ] && n=$((n + 1))
else
	: >"$priv/sources.list"
fi
if [ "$n" = 0 ]; then
	echo "fetch-nvidia: no Debian archive entry in the system's apt sources to extend with contrib and non-free" >&2
	exit 1
fi

apt=(apt-get -q
	-o "Dir::Etc::SourceList=$priv/sources.list"
	-o "Dir::Etc::SourceParts=$priv/sources.list.d"
	-o "Dir::State::Lists=$priv/lists"
	-o "Dir::Cache=$priv/cache"
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=$(id -un)")

echo "fetch-nvidia: refreshing a private package index with contrib and non-free"
"${apt[@]}" update >"$priv/update.log" 2>&1 || { cat "$priv/update.log" >&2; echo "fetch-nvidia: apt-get update failed" >&2; exit 1; }
echo "fetch-nvidia: downloading nvidia-cuda-toolkit, libcuda1, libnvidia-ptxjitcompiler1"
(cd "$priv/dl" && "${apt[@]}" download nvidia-cuda-toolkit libcuda1 libnvidia-ptxjitcompiler1) ||
	{ echo "fetch-nvidia: apt-get download failed" >&2; exit 1; }

x="$priv/x"
for deb in "$priv"/dl/*.deb; do
	dpkg -x "$deb" "$x"
done
ptxas=$(find "$x" -path '*/bin/ptxas' -type f | head -n 1)
libcuda=$(find "$x" -name 'libcuda.so.1' | head -n 1)
if [ -z "$ptxas" ] || [ -z "$libcuda" ]; then
	echo "fetch-nvidia: the packages hold no bin/ptxas or libcuda.so.1" >&2
	exit 1
fi
mkdir -p "$dir/bin" "$dir/lib"
cp "$ptxas" "$dir/bin/ptxas.tmp" && mv "$dir/bin/ptxas.tmp" "$dir/bin/ptxas"
# The libraries by their sonames (links to the versioned files: copy what
# they resolve to): the driver, and the JIT compiler it loads next to it.
for f in "$libcuda" "$(find "$x" -name 'libnvidia-ptxjitcompiler.so.1' | head -n 1)"; do
	[ -n "$f" ] || continue
	cp -L "$f" "$dir/lib/$(basename "$f").tmp" && mv "$dir/lib/$(basename "$f").tmp" "$dir/lib/$(basename "$f")"
done
for deb in "$priv"/dl/*.deb; do
	dpkg-deb -f "$deb" Package Version | paste -sd' '
done >"$dir/versions"
rm -rf "$priv"
echo "fetch-nvidia: $dir/bin/ptxas ($("$dir/bin/ptxas" --version | tail -n 1)), $dir/lib/libcuda.so.1"
