# x1 H100: the transfer (#22) at HEAD, leave-one-out over six problems, resumable in .transfer13
# (a previous call's state travels as .gpu/transfer13.tgz); then optional suite problems (PROBS) under OPTS
source .gpu/setup.sh; prov ${CALL:-s13c4}
[ -f .gpu/transfer13.tgz ] && tar -xzf .gpu/transfer13.tgz
if [ "${TR_S:-0}" -gt 0 ]; then
  timeout -s TERM -k 10 $TR_S python3 benchmarks/transfer.py --optimizer strategies --no-profile --budget-evals 10 --problems softmax,log_softmax,cross_entropy,rmsnorm,layernorm,bias_silu_residual -o .transfer13 > $OUT/transfer.log 2>&1; echo "transfer rc=$?" >> $OUT/transfer.log
  grep -E "^[AB] |re-timed|rc=|Overall|Incomplete" $OUT/transfer.log | tail -30 | cut -c1-200
  tar -czf $OUT/transfer13.tgz --exclude='*.ncu-rep' .transfer13; ls -la $OUT/transfer13.tgz
fi
for OPT in $OPTS; do
  left=$(( ${END_S:-580} - SECONDS )); [ $left -lt 60 ] && break
  timeout -s INT -k 30 $left kernelopt suite run benchmarks/suite --optimizer $OPT --budget-minutes 2 --no-experience --problems $PROBS -o .suite13h_$OPT > $OUT/suite_h_$OPT.log 2>&1; echo "suite rc=$?" >> $OUT/suite_h_$OPT.log
  tail -8 $OUT/suite_h_$OPT.log | cut -c1-200
  tar -czf $OUT/suite13h_$OPT.tgz --exclude='*.ncu-rep' .suite13h_$OPT
done
