#!/usr/bin/env bash
# Makes the image's base from the Debian mirror apt already uses, and imports it into podman's
# local storage as localhost/receipt-reconciler-base:bookworm. Only what the binary loads:
# mmdebstrap's `extract` variant unpacks libpq5, libcurl4, libstdc++6 and ca-certificates with
# their dependencies and runs no maintainer script (there is no shell to run them), so what those
# scripts would make is made here, from the host: the CA bundle, the linker's cache, the users.
set -euo pipefail
tag=${1:-localhost/receipt-reconciler-base:bookworm}
work=$(mktemp -d /tmp/receipt-reconciler-base.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The mirror apt uses (deb822 or one-line sources): the machine's own, never one named here.
mirror=$(grep -hsoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list | head -n 1 | awk '{print $2}' | sed 's:/$::' || true)
if [ -z "$mirror" ]; then
    echo "image/base.sh: apt on this machine names no Debian mirror (in /etc/apt/sources.list.d/*.sources, *.list or" >&2
    echo "/etc/apt/sources.list); the base image is made from the mirror apt already uses: configure apt first" >&2
    exit 2
fi

mmdebstrap --quiet --variant=extract --include=libpq5,libcurl4,libstdc++6,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$work/root" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $mirror-security bookworm-security main"
root="$work/root"

# What ca-certificates' postinst would write: the bundle libcurl reads.
mkdir -p "$root/etc/ssl/certs"
cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
# What libc6's trigger would write: the dynamic linker's cache.
ldconfig -r "$root"
# The users: root, and the reconciler the image runs as.
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nreconciler:x:10001:10001:receipt-reconciler:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nreconciler:x:10001:\n' >"$root/etc/group"
# Where the job writes its reports by default: owned by the reconciler (the manifests mount a
# volume over it, since their root filesystem is read-only).
mkdir -p "$root/reports" "$root/tmp"
chown 10001:10001 "$root/reports"
chmod 1777 "$root/tmp"
# The package manager's leftovers: nothing at run time reads them.
rm -rf "$root/var/cache/apt" "$root/var/lib/apt/lists" "$root/var/log"/* "$root/usr/share/doc"

tar --numeric-owner -C "$root" -cf - . | podman import -q - "$tag" >/dev/null
echo "base image $tag made from $mirror"
