#!/usr/bin/env bash
# Round 10, device call 3 (about 250 s): the ncu child prestarted at collection (its start-up overlaps the measuring
# of the tests before the first ncu test): gpu/ncu_user.sh (five parametrized tests of a user's file selected by -k;
# goal 5 of 5 captured, <= 5 s per test beyond the plain run), a one-test process three times, then ncu_user.sh again
# if the device time allows.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
OUT=$OUT/n1 timeout 120 bash gpu/ncu_user.sh 2>&1 | tail -n 4
echo "ncu_user 1: $(( $(date +%s) - t0 )) s"
PARTS=5 ONE_RUNS=3 OUT=$OUT timeout 70 bash gpu/cost.sh 2>&1 | tail -n 3
echo "one-test: $(( $(date +%s) - t0 )) s"
OUT=$OUT/n2 timeout 120 bash gpu/ncu_user.sh 2>&1 | tail -n 4
echo "total $(( $(date +%s) - t0 )) s"
for d in n1 n2; do rm -rf $OUT/$d/ncu_user/artifacts $OUT/$d/ncu_user/baselines; done
tar czf $OUT/ncu.tgz -C $OUT n1 n2 2>/dev/null; rm -rf $OUT/n1 $OUT/n2
