source .gpu/setup.sh; prov s10c5
set -o pipefail
timeout -s TERM -k 5 150 python3 -m pytest -v -s -rfE -p no:cacheprovider tests/gpu/test_transforms_gpu.py -k "specialize" 2>&1 | tee $OUT/specialize_gpu.txt | grep -E "original|PASSED|FAILED|passed|failed|Error" | cut -c1-220
timeout -s TERM -k 5 170 python3 -m pytest -v -s -rfE -p no:cacheprovider tests/gpu/test_transforms_gpu.py -k "dot_preset" 2>&1 | tee $OUT/dot_preset_gpu.txt | grep -E "original|PASSED|FAILED|passed|failed|Error" | cut -c1-220
