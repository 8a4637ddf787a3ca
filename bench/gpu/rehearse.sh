#!/bin/bash
# The GPU host's sequence rehearsed on this machine's CPU (docs/engine.md, "Running on a GPU
# test host"): after `npm run gpu:pack`, each part goes alone into a fresh folder and through
# bench/gpu/receive.sh, as one transfer would, into a store away from the checkout; the last
# joins, checks and unpacks them and runs the pack's run.sh with the CPU provider of the pack's
# own ONNX Runtime. Then `npm run bench:gpu` runs the same measurement from the checkout, and
# the two are printed side by side.
#
#   bench/gpu/rehearse.sh [bench arguments]   (default: a short run, sface:mirror, batches 1 and 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -e .gpu-pack/parts/SHA256SUMS ] || { echo "no pack: npm run gpu:pack first"; exit 1; }
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--modes sface:mirror --batches 1,4 --sets demo,12mp --time 2000 --no-start)
store=$(mktemp -d /tmp/gpu-rehearsal.XXXXXX)
trap 'rm -rf "$store"' EXIT
parts=(.gpu-pack/parts/part-*)
for i in "${!parts[@]}"; do
    carried="$store/carried-$i"
    mkdir -p "$carried"
    cp "${parts[$i]}" .gpu-pack/parts/SHA256SUMS .gpu-pack/parts/NEEDS "$carried/"
    echo "== transfer $((i + 1)) of ${#parts[@]}: $(basename "${parts[$i]}")"
    if [ "$i" -lt $((${#parts[@]} - 1)) ]; then
        STORE="$store/host" PARTS="$carried" bash bench/gpu/receive.sh
    else
        STORE="$store/host" PARTS="$carried" OUT="$store/out" bash bench/gpu/receive.sh --run 600 --providers cpu "${args[@]}"
    fi
    rm -rf "$carried"
done
echo "== the same from the checkout: npm run bench:gpu -- ${args[*]}"
npm run --silent bench:gpu -- "${args[@]}" --json "$store/checkout.json" 2>/dev/null | tail -n 3
python3 - "$store/out/report.json" "$store/checkout.json" <<'PY'
import json, sys
pack, here = (json.load(open(f)) for f in sys.argv[1:3])
key = lambda r: (r["mode"], r["set"], r["batch"], r["task"])
rows = {key(r): r for r in here["throughput"]}
print(f"{'row':<44} {'pack faces/s':>12} {'checkout':>10} {'ratio':>6}")
for r in pack["throughput"]:
    h = rows.get(key(r))
    if h:
        print(f"{' '.join(map(str, key(r))):<44} {r['facesPerSecond']:>12.1f} {h['facesPerSecond']:>10.1f} {r['facesPerSecond'] / h['facesPerSecond']:>6.2f}")
for p, h in zip(pack.get("precision", []), here.get("precision", [])):
    print(f"fp16 vs fp32 {p['mode']}: pack min cosine {p['minCosine']:.6f}, verdicts differing {p['mediumVerdictsDiffering']}; checkout {h['minCosine']:.6f}, {h['mediumVerdictsDiffering']}")
PY
