# x1 H100 call: GPU tests at HEAD (timing, profile, trust), the .ncu-rep reader child with the extras reader
# (no ncu_report wheel), then strategies on two suite problems (probation, flat_elementwise path)
source .gpu/setup.sh; prov s13c1
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
T 120 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_timing.py > $OUT/timing_gpu.txt 2>&1; echo rc=$? >> $OUT/timing_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/timing_gpu.txt | cut -c1-220 | tail -10
T 120 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_profile.py > $OUT/profile_gpu.txt 2>&1; echo rc=$? >> $OUT/profile_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/profile_gpu.txt | cut -c1-220 | tail -10
# the extras reader in its child: a site without ncu_report
mkdir -p /tmp/site2; python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 $(ls .whl/*.whl | grep -v ncu_report) >/dev/null 2>&1
( export PYTHONPATH=/tmp/site2:$PWD; python3 -c "import ncu_report" 2>&1 | tail -1; T 90 kernelopt profile examples/softmax/problem.py --kernel examples/softmax/kernel.py -o /tmp/prof_extras > $OUT/profile_extras.txt 2>&1; echo rc=$? >> $OUT/profile_extras.txt; T 60 kernelopt profile examples/softmax/problem.py --import /tmp/prof_extras/*.ncu-rep --json > $OUT/profile_extras_import.json 2>>$OUT/profile_extras.txt; echo import rc=$? >> $OUT/profile_extras.txt )
tail -5 $OUT/profile_extras.txt | cut -c1-250; head -c 300 $OUT/profile_extras_import.json; echo
T 250 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py -k "not fake_clock and not ordinary_user" > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-220 | tail -26
SUITE_S=$(( ${END_S:-575} - SECONDS )); if [ "$SUITE_S" -gt 60 ]; then
timeout -s INT -k 30 $SUITE_S kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --problems ${PROBS:-bias_silu_residual} -o .suite13a > $OUT/suite_a.log 2>&1; echo "suite rc=$?" >> $OUT/suite_a.log
tail -12 $OUT/suite_a.log | cut -c1-250
tar -czf $OUT/suite13a.tgz --exclude='*.ncu-rep' .suite13a; ls -la $OUT/suite13a.tgz
fi
