source .gpu/setup.sh; prov s10c1
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
set -o pipefail
T 420 python3 -m pytest -v -s -p no:cacheprovider tests/gpu/test_trust_gpu.py tests/gpu/test_arena_gpu.py 2>&1 | tee $OUT/trust_gpu.txt | grep -E "PASS|FAIL|ERROR|passed|failed|Error" | tail -40
T 150 python3 -m pytest -v -p no:cacheprovider tests/gpu/test_transforms_gpu.py -k "blockaxis" 2>&1 | tee $OUT/blockaxis_gpu.txt | grep -E "PASS|FAIL|ERROR|passed|failed" | tail -20
