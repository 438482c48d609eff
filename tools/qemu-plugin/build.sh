#!/usr/bin/env bash
# Builds the xlate QEMU tracing plugin into ${CARGO_TARGET_DIR:-target}/qemu-plugin/libxlate_trace.so.
#
# 1. Installs qemu-user, gcc, pkg-config and libglib2.0-dev with apt-get if they are missing.
# 2. Fetches include/qemu/qemu-plugin.h for the *installed* QEMU from Debian's qemu source package
#    (apt-get source --download-only qemu=VERSION; deb-src lines for the configured suites are
#    added in /etc/apt/sources.list.d/xlate-deb-src.sources if none exist) and caches it under
#    target/qemu-plugin/include/VERSION/. The header is never committed.
# 3. Checks the header's QEMU_PLUGIN_VERSION and compiles xlate_trace.c.
#
# Exits non-zero with a message saying what is missing when it cannot build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
out_dir="$target/qemu-plugin"
say() { echo "qemu-plugin: $*" >&2; }
die() { say "error: $*"; exit 1; }

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); fi
fi
apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
    if [ "$apt_updated" = 0 ]; then
        say "apt-get update"
        "${sudo_cmd[@]}" apt-get update -qq >&2 || die "apt-get update failed"
        apt_updated=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$@" >&2 \
        || die "apt-get install $* failed"
}

host_arch="$(uname -m)"
case "$host_arch" in
    x86_64 | aarch64 | riscv64 | ppc64le | s390x) qemu_bin="qemu-$host_arch" ;;
    *) die "no QEMU user-mode emulator known for host architecture $host_arch" ;;
esac

need=()
command -v "$qemu_bin" >/dev/null 2>&1 || need+=(qemu-user)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
pkg-config --exists glib-2.0 2>/dev/null || need+=(libglib2.0-dev)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi
command -v "$qemu_bin" >/dev/null 2>&1 || die "$qemu_bin still missing after installing qemu-user"

# The source package version of the installed emulator (binNMU suffixes such as +b3 dropped).
pkg="$(dpkg-query -S "$(command -v "$qemu_bin")" 2>/dev/null | head -1 | cut -d: -f1)" || true
[ -n "$pkg" ] || pkg=qemu-user
src_ver="$(dpkg-query -W -f='${source:Version}' "$pkg" 2>/dev/null)" || die "cannot tell which qemu package provides $qemu_bin"
src_name="$(dpkg-query -W -f='${source:Package}' "$pkg")"
say "$qemu_bin from $pkg, source package $src_name $src_ver ($("$qemu_bin" --version | head -1))"

# Source versions apt offers for $src_name.
offered() { apt-cache showsrc "$src_name" 2>/dev/null | sed -n 's/^Version: //p'; }
hdr_dir="$out_dir/include/${src_ver//:/_}"
if [ ! -s "$hdr_dir/qemu-plugin.h" ]; then
    if [ -z "$(offered)" ]; then
        list=/etc/apt/sources.list.d/xlate-deb-src.sources
        say "no deb-src entry offers $src_name $src_ver: adding $list"
        tmp="$(mktemp)"
        # deb822 files: every 'Types: deb' stanza again as deb-src.
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -e "$f" ] && [ "$f" != "$list" ] || continue
            awk 'BEGIN{RS=""; ORS="\n\n"} /(^|\n)Types:[^\n]*(^| )deb( |\n|$)/ {
                     sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" >>"$tmp"
        done
        # One-line sources.list entries: deb [opts] URI SUITE COMPONENTS...
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -e "$f" ] || continue
            awk '$1 == "deb" {
                    i = 2; signed = ""
                    if ($2 ~ /^\[/) {
                        while (i <= NF) { o = $i; i++
                            if (match(o, /signed-by=[^] ]*/)) signed = substr(o, RSTART + 10, RLENGTH - 10)
                            if (o ~ /\]$/) break }
                    }
                    comps = ""; for (j = i + 2; j <= NF; j++) comps = comps (comps == "" ? "" : " ") $j
                    printf "Types: deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n", $i, $(i + 1), comps
                    if (signed != "") printf "Signed-By: %s\n", signed
                    printf "\n" }' "$f" >>"$tmp"
        done
        [ -s "$tmp" ] || die "found no apt 'deb' sources to mirror as deb-src"
        "${sudo_cmd[@]}" install -m 0644 "$tmp" "$list"
        rm -f "$tmp"
        apt_updated=0
        say "apt-get update (for the deb-src lists)"
        "${sudo_cmd[@]}" apt-get update -qq >&2 || die "apt-get update failed"
        [ -n "$(offered)" ] || die "the apt sources offer no source package $src_name (is the suite's deb-src reachable?)"
    fi
    # The exact version, or else one of the same upstream release (same .orig tarball, same header).
    get_ver="$(offered | grep -Fx -- "$src_ver" | head -1)" || true
    if [ -z "$get_ver" ]; then
        upstream="${src_ver%-*}"
        get_ver="$(offered | while read -r v; do [ "${v%-*}" = "$upstream" ] && echo "$v"; done | head -1)" || true
        [ -n "$get_ver" ] || die "apt offers $src_name $(offered | paste -sd, -) but not $src_ver nor another $upstream revision"
        say "source $src_ver not offered; using $get_ver (same upstream $upstream)"
    fi
    work="$(mktemp -d)"
    chmod 755 "$work" # apt downloads as the _apt user
    trap 'rm -rf "$work"' EXIT
    say "apt-get source --download-only $src_name=$get_ver"
    (cd "$work" && apt-get source -qq -o APT::Sandbox::User=root --download-only "$src_name=$get_ver" >&2) \
        || die "apt-get source $src_name=$get_ver failed"
    orig="$(ls "$work"/*.orig.tar.* 2>/dev/null | head -1)"
    [ -n "$orig" ] || die "no .orig tarball in the source package"
    mkdir -p "$work/x"
    tar -xf "$orig" -C "$work/x" --wildcards '*/include/qemu/qemu-plugin.h' \
        || die "the source package holds no include/qemu/qemu-plugin.h"
    # Debian's own patches: refuse silently wrong headers.
    deb="$(ls "$work"/*.debian.tar.* 2>/dev/null | head -1)"
    if [ -n "$deb" ] && tar -xOf "$deb" --wildcards 'debian/patches/*' 2>/dev/null | grep -q '^+++ .*include/qemu/qemu-plugin.h'; then
        die "Debian's patches modify qemu-plugin.h in $src_ver; extend build.sh to apply them"
    fi
    mkdir -p "$hdr_dir"
    find "$work/x" -name qemu-plugin.h -path '*include/qemu/*' -exec cp {} "$hdr_dir/qemu-plugin.h" \;
    rm -rf "$work"
    trap - EXIT
fi

api="$(sed -n 's/^#define QEMU_PLUGIN_VERSION[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$hdr_dir/qemu-plugin.h")"
[ "$api" = 1 ] || die "qemu-plugin.h declares QEMU_PLUGIN_VERSION '$api'; xlate_trace.c is written for 1 (QEMU 7.2)"
say "plugin API version $api (header $hdr_dir/qemu-plugin.h)"

mkdir -p "$out_dir"
# shellcheck disable=SC2046
gcc -O2 -g -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -fvisibility=hidden \
    $(pkg-config --cflags glib-2.0) -I"$hdr_dir" \
    "$here/xlate_trace.c" -o "$out_dir/libxlate_trace.so.tmp" -lpthread
mv "$out_dir/libxlate_trace.so.tmp" "$out_dir/libxlate_trace.so"

# Smoke test: QEMU loads the plugin and it streams a header.
smoke="$(mktemp)"
if ! "$qemu_bin" -plugin "$out_dir/libxlate_trace.so,out=$smoke" /bin/true 2>"$smoke.err"; then
    cat "$smoke.err" >&2
    rm -f "$smoke" "$smoke.err"
    die "$qemu_bin could not run /bin/true with the plugin"
fi
magic="$(head -c 8 "$smoke")"
rm -f "$smoke" "$smoke.err"
[ "$magic" = XLQTRACE ] || die "the plugin loaded but wrote no XLQTRACE header"
say "built $out_dir/libxlate_trace.so"
