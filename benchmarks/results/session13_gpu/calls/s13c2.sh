# x4: the strategies suite at HEAD on all four GPUs (resumable in .suite13); optional GPU tests on GPU 0 first (TESTS=1)
source .gpu/setup.sh; prov ${CALL:-s13c2}
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
OPT=${OPT:-strategies}; DIR=.suite13${OPT:0:1}
if [ -n "$TESTS" ]; then
  ( export CUDA_VISIBLE_DEVICES=0
    T 330 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py -k "side_stream or guard_overlap or garbage_until or hidden_beside or thread_that or digest or fake_clock or ordinary_user" > $OUT/trust_gpu2.txt 2>&1; echo rc=$? >> $OUT/trust_gpu2.txt
    T 200 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_profile.py -k ncu_fails > $OUT/profile_gpu2.txt 2>&1; echo rc=$? >> $OUT/profile_gpu2.txt ) &
  TP=$!
fi
CUDA_VISIBLE_DEVICES=${SUITE_GPUS:-0,1,2,3} timeout -s INT -k 30 ${SUITE_S:-560} kernelopt suite run benchmarks/suite --optimizer $OPT --budget-minutes 2 --no-experience --parallel-problems --problems $PROBS -o $DIR > $OUT/suite_$OPT.log 2>&1; echo "suite rc=$?" >> $OUT/suite_$OPT.log
tail -25 $OUT/suite_$OPT.log | cut -c1-250
[ -n "$TESTS" ] && { wait $TP; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu2.txt $OUT/profile_gpu2.txt | cut -c1-200 | tail -30; }
tar -czf $OUT/$DIR.tgz --exclude='*.ncu-rep' $DIR; ls -la $OUT/$DIR.tgz
