#!/bin/bash
# The GPU bench from an unpacked pack (`npm run gpu:pack`), with no Node and no network: finds
# the CUDA 13 libraries in the machine's Python packages (nvidia-* wheels, as PyTorch's image
# has them), puts them and the pack's ONNX Runtime on the library path, and runs the bench with
# the CUDA provider, TensorRT first when its libnvinfer is on the machine.
#
#   run.sh OUT [bench arguments]   report in OUT: bench.txt, report.json, engine-log.txt
#   run.sh --check                 only say which of the libraries the pack needs are found
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# Every folder named lib under an nvidia/ package folder of the machine's Python.
cuda_dirs=$(python3 - <<'PY'
import os, site
bases = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
dirs = set()
for base in bases:
    for root, _, files in os.walk(os.path.join(base, "nvidia")):
        if os.path.basename(root) == "lib" and any(".so" in f for f in files):
            dirs.add(root)
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="$here/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Whether a shared library is on the path or known to the loader.
found() {
    ldconfig -p 2>/dev/null | grep -q "[[:space:]]$1 " && return 0
    local d
    IFS=: read -ra dirs <<<"$LD_LIBRARY_PATH"
    for d in "${dirs[@]}"; do [ -e "$d/$1" ] && return 0; done
    return 1
}

providers=cuda,cpu
found libnvinfer.so.10 && providers=tensorrt,cuda,cpu

if [ "${1:-}" = --check ]; then
    needs=${NEEDS:-$here/NEEDS}
    echo "python3: $(python3 --version 2>&1); CUDA library folders: ${cuda_dirs:-none}"
    missing=0
    for lib in $(cat "$needs"); do
        if found "$lib"; then echo "  found $lib"; else echo "  MISSING $lib"; missing=$((missing + 1)); fi
    done
    echo "providers: $providers; $missing needed libraries missing"
    exit "$missing"
fi

out=${1:?usage: run.sh OUT [bench arguments] | run.sh --check}
shift
mkdir -p "$out"
echo "providers: $providers"
status=0
"$here/bin/face-gpu-bench" --plan "$here/plan.json" --providers "$providers" --json "$out/report.json" "$@" \
    2>"$out/engine-log.txt" | tee "$out/bench.txt" || status=$?
# The engine logs one JSON line per event on stderr; the last ones say why a run stopped.
[ "$status" -eq 0 ] || tail -n 20 "$out/engine-log.txt"
exit "$status"
