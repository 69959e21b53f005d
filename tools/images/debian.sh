#!/usr/bin/env bash
# Recipe of the Debian test images: a minimal debootstrap of SUITE with what Ansible and the
# roles expect on a fresh host (python3, python3-apt, sudo, gnupg, ca-certificates), imported
# into the local Docker engine as TAG. Changing this file changes every image's tag.
# Usage (as root): debian.sh SUITE TAG
set -euo pipefail
suite=$1 tag=$2
root=$(mktemp -d /var/tmp/rocmlab-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT

# The distribution's default mirror (debootstrap's own default), as on a fresh install.
debootstrap --variant=minbase \
  --include=python3,python3-apt,sudo,gnupg,ca-certificates,procps \
  "$suite" "$root" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"

# A fresh host has no package lists cached yet; the roles must cope with that.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin

tar -C "$root" -c . | docker import \
  --change 'CMD ["sleep", "infinity"]' \
  --change 'ENV LANG=C.UTF-8' \
  --message "rocmlab test image: debootstrap $suite" - "$tag" >/dev/null
echo "$tag"
