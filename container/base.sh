#!/usr/bin/env bash
# Builds the local base image for the Containerfile: a minimal Debian bookworm root
# filesystem made with debootstrap from the Debian archive alone, imported into podman.
#
#   bash container/base.sh            # -> localhost/bookworm-base
#
# Then: podman build --isolation=chroot --build-arg BASE=localhost/bookworm-base ...
# Environment: BASE_IMAGE (image name), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR.
set -euo pipefail

image=${BASE_IMAGE:-localhost/bookworm-base}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { echo "base.sh: $tool is not installed" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "base.sh: debootstrap needs root" >&2; exit 1; }

root=$(mktemp -d /var/tmp/bookworm-base.XXXXXX)
trap 'rm -rf "$root"' EXIT

# minbase: dpkg, apt and essential packages only; the Containerfile adds the rest.
debootstrap --variant=minbase bookworm "$root" "$mirror"

# debootstrap writes only the release suite; security and point-release updates are
# what keep the image patched (and hold the newer rustc-web the builder needs).
cat >"$root/etc/apt/sources.list" <<LIST
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
LIST

# Like the official slim images: no recommends, no documentation, no package caches
# (apt's binary caches alone are 80 MB).
cat >"$root/etc/apt/apt.conf.d/90container" <<'CONF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
cat >"$root/etc/dpkg/dpkg.cfg.d/90container" <<'CONF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CONF
# The same for what debootstrap already installed (copyright files stay).
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete

tar --numeric-owner -C "$root" -c . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  - "$image"
echo "base.sh: built $image"
