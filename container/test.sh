#!/usr/bin/env bash
# Builds a face-service image and smoke-tests it: the service starts inside the image as its
# own user, with a fresh data folder and the embedded PostgreSQL, answers /health and the
# image's HEALTHCHECK, finds the five faces of a demo photo through /v1/detect/ (with age,
# gender and emotions), counts that detect in /metrics, and stops cleanly on SIGTERM
# (container/smoke.mjs).
#
#   bash container/test.sh            # CPU image  -> localhost/face-service:latest
#   bash container/test.sh gpu        # GPU image  -> localhost/face-service:gpu (runs on the CPU
#                                     #   provider where there is no GPU, and says so)
#   bash container/test.sh cpu --no-build    # test the image already built
#
# The base image (localhost/bookworm-base) is made with container/base.sh when missing. The
# container runs through buildah with chroot isolation, so it needs no container runtime,
# cgroups or user namespaces, and shares the host's network: the smoke test picks a free
# loopback port. Environment: BASE_IMAGE, IMAGE (repository, default localhost/face-service),
# TENSORRT (build argument of the gpu target, see the Containerfile).
set -euo pipefail
cd "$(dirname "$0")/.."

variant=cpu
build=1
for arg in "$@"; do
  case $arg in
    cpu | gpu) variant=$arg ;;
    --no-build) build=0 ;;
    *) echo "usage: container/test.sh [cpu|gpu] [--no-build]" >&2; exit 2 ;;
  esac
done

base=${BASE_IMAGE:-localhost/bookworm-base}
repo=${IMAGE:-localhost/face-service}
if [ "$variant" = gpu ]; then image=$repo:gpu; else image=$repo:latest; fi

say() { echo "[test.sh] $*"; }
die() { echo "[test.sh] FAIL: $*" >&2; exit 1; }

for tool in podman buildah; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
# The smoke test's photo: a dev dependency's, so it comes from this checkout, not the image.
photo=node_modules/@vladmandic/face-api/demo/sample5.jpg
[ -f "$photo" ] || die "no $photo (npm install brings it)"

if [ "$build" = 1 ]; then
  if ! podman image exists "$base"; then
    say "no $base: building it (container/base.sh)"
    bash container/base.sh || die "container/base.sh failed"
  fi
  # Certificates this host trusts beyond Debian's list (a TLS-inspecting proxy's, say) are
  # needed by the build stages' downloads; container/certs/ keeps them out of the runtime images.
  for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$crt" ] && cp "$crt" container/certs/
  done
  say "building $image (target $variant)"
  start=$(date +%s)
  nice -n 10 podman build --isolation=chroot --format docker \
    --build-arg BASE="$base" ${TENSORRT:+--build-arg TENSORRT="$TENSORRT"} \
    --target "$variant" -t "$image" -f Containerfile . || die "podman build of $image failed"
  say "built $image in $(($(date +%s) - start)) s"
fi

podman image exists "$image" || die "no image $image (run without --no-build)"
size=$(podman image inspect --format '{{.Size}}' "$image")
say "image $image: $((size / 1000000)) MB"

user=$(podman image inspect --format '{{.Config.User}}' "$image")
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || die "$image has no non-root USER (got '$user')"
# The HEALTHCHECK's command, handed to the smoke test to run as Docker would.
healthcheck=$(podman image inspect --format '{{json .HealthCheck.Test}}' "$image" 2>/dev/null || true)
if [ -z "$healthcheck" ] || [ "$healthcheck" = null ]; then
  healthcheck=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$image" 2>/dev/null || true)
fi
case $healthcheck in
  '["CMD",'*) healthcheck="[${healthcheck#\[\"CMD\",}" ;;
  *) die "$image has no exec-form HEALTHCHECK (got '$healthcheck'); build it with --format docker" ;;
esac
# The image's own command line, ENTRYPOINT (tini) included.
entrypoint=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$image")
cmd=$(podman image inspect --format '{{json .Config.Cmd}}' "$image")
case $entrypoint in
  '['*'"'*) cmd="${entrypoint%]},${cmd#[}" ;;
esac

ctr=$(buildah from --pull-never --name "face-smoke-$$" "$image")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah copy --chmod 0644 "$ctr" container/smoke.mjs /tmp/smoke.mjs >/dev/null
buildah copy --chmod 0644 "$ctr" "$photo" /tmp/sample5.jpg >/dev/null

say "running the smoke test in $ctr as $user"
# tini is not PID 1 here (node is); as a subreaper it still reaps and forwards SIGTERM.
buildah run --isolation chroot --env TINI_SUBREAPER=1 \
  --env SMOKE_CMD="$cmd" --env SMOKE_HEALTHCHECK="$healthcheck" \
  "$ctr" -- node /tmp/smoke.mjs || die "smoke test of $image failed"
say "PASS: $image"
