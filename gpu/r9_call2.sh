#!/usr/bin/env bash
# Round 9, device call 2 (445 s), run at the commit whose power warm-up held the state over three windows (reverted
# after this call: it tripled the warm-up): the parts of gpu/r9_call3.sh with two one-test A/B runs and two stored
# GEMM verdict runs per case (its 10-test A/B part ran into its timeout after two runs).
AB1_RUNS=2 VERDICT_RUNS=2 VERDICT_DEADLINE=80 bash gpu/r9_call3.sh
