#!/bin/bash
# On the GPU host, once per transfer (docs/engine.md, "Running on a GPU test host"): keeps the
# parts this call carried in a folder outside the checkout, where the next call finds them,
# and checks each against SHA256SUMS. The first call also reports the host: GPU, Python, Node,
# and which libraries the pack needs are there. With --run, once every part is here: joins
# them, checks the whole, unpacks, and runs the pack's run.sh under a time limit, its report
# under OUT.
#
#   bench/gpu/receive.sh                      store the parts carried in .gpu-pack/parts
#   bench/gpu/receive.sh --run SECONDS [bench arguments]
#
# STORE (default /var/tmp/face-gpu-pack) and PARTS (default .gpu-pack/parts) move the two
# folders; OUT (the device's) is where a run's report goes (default STORE/out).
set -euo pipefail
store=${STORE:-/var/tmp/face-gpu-pack}
parts=${PARTS:-.gpu-pack/parts}
out=${OUT:-$store/out}
start=$(date +%s.%N)
repo=$(pwd)
stamp() { awk -v t0="$start" -v now="$(date +%s.%N)" -v msg="$*" 'BEGIN { printf "[%6.1f s] %s\n", now - t0, msg }'; }

mkdir -p "$store/parts"
first=0
[ -e "$store/parts/SHA256SUMS" ] || first=1
cp "$parts"/* "$store/parts/"
cd "$store/parts"
total=$(grep -c ' part-' SHA256SUMS)
here=$(ls part-* 2>/dev/null | wc -l)
grep ' part-' SHA256SUMS | while read -r sum name; do
    [ -e "$name" ] || continue
    echo "$sum  $name" | sha256sum -c --quiet - || { echo "part $name is damaged"; exit 1; }
done
stamp "parts here: $here of $total ($(du -ch part-* | tail -1 | cut -f1))"

if [ "$first" = 1 ]; then
    echo "host: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1); $(nproc) cores"
    echo "node: $(node --version 2>/dev/null || echo none); xz: $(command -v xz || echo none)"
    NEEDS="$store/parts/NEEDS" bash "$repo/bench/gpu/run.sh" --check || true
fi

[ "${1:-}" = --run ] || exit 0
limit=${2:?--run takes the seconds the bench may run}
shift 2
[ "$here" = "$total" ] || { echo "only $here of $total parts are here"; exit 1; }
whole=$(grep ' pack.tar.xz$' SHA256SUMS | cut -d' ' -f1)
# Joined, checked and unpacked in one pass over the parts.
rm -rf "$store/face-gpu-pack"
cat part-* | tee >(sha256sum | cut -d' ' -f1 >"$store/joined.sha256") \
    | if command -v xz >/dev/null; then xz -d; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'; fi \
    | tar -x -C "$store"
sleep 1 # the checksum's subshell writes its line after tar ends
[ "$(cat "$store/joined.sha256")" = "$whole" ] || { echo "the joined pack does not match its checksum"; exit 1; }
stamp "joined, checked and unpacked: $(du -sh "$store/face-gpu-pack" | cut -f1)"
status=0
timeout --kill-after=10 "$limit" "$store/face-gpu-pack/run.sh" "$out" "$@" || status=$?
stamp "bench ended with status $status"
exit "$status"
