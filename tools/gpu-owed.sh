#!/usr/bin/env bash
# The H200 measurements owed after session 11 (2026-12-02), in device calls of ~500 s:
#   bash tools/gpu-owed.sh TASKS_TARBALL [RUN_TARBALL]        # part 1
#   PART=2 bash tools/gpu-owed.sh TASKS_TARBALL               # part 2
# TASKS_TARBALL: `kernelsmith extract --all` at this commit (with its compile check, so no task
# keeps an instantiation nvcc refuses, as rmsnorm_hf's fp32 did in session 11), cut to the ops
# below (the full tarball with both wheels is over the 64 MiB carry). RUN_TARBALL: session 11's
# run-sweep-b.tgz, whose accepted apply_rope_with_cos_sin_cache_inplace is integrated first.
# Carry .whl, .dev/wheels and the tarballs; for the agent step also .dev/agent (AGENT=MANIFEST:
# the outside coder's prepared candidates, kept out of git because they derive from SGLang).
# Part 1:
#   1. integrate RUN_TARBALL's run (SGLang's build and public op);
#   2. AGENT=...: tools/gpu-agent.sh on that manifest. Session 11 left .dev/agent/manifest-owed.tsv
#      (built with `kernelsmith agent build` on the CPU machine, not yet measured): per_token_quant_fp8's
#      register-row kernel with 128-thread CTAs for short rows (it lost 0.85x at hidden 4096 with
#      256), shuffle_weighted_sum's 16-byte vector kernel without and with PDL for small grids, and
#      bias_gelu_tanh's loop without the 64-bit modulo; the tasks tarball must hold those ops;
#   3. one PDL-family round on the ops session 11 did not reach, and shuffle_weighted_sum again
#      with pdl_small_grids' new in_kernel choice (its 0.51x at Mixtral top-2 is the measure).
# Part 2: the rest of the ops that launch with PDL and trigger at their end (sweep B), and the
#   pair-cut rate owed since session 10 (relu2 and per_token_quant_fp8 with every skill).
set -o pipefail
here="$(dirname "$0")"
# one device call brings back at most 8 files: whatever the steps wrote is packed into one at the end
pack() { [ -n "${OUT:-}" ] && tar -czf /tmp/owed.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/owed.tgz "$OUT/"; }
trap pack EXIT
tasks="${1:?a tarball of work/tasks}"
run_tar="${2:-}"
status=0
pdl_off="pdl_enable,pdl_small_grids,pdl_early_trigger"
pdl_on="pdl_early_trigger,pdl_trigger_small_grids"
if [ "${PART:-1}" = 2 ]; then
  RUN=sweep-e SKILLS="$pdl_on" SWEEP_S="${SWEEP_S:-300}" OPS="attention.apply_rope_inplace \
attention.set_mla_kv_concat_q_fp8 attention.topk_transform_paged_v2 moe.inkling_gate_gemv moe.inkling_gate_gemv_fused \
moe.inkling_gate_topk_renorm_v2 moe.moe_align_single_token moe.per_token_quant_fp8_ue8m0_scatter \
layernorm.grouped_gemma_rmsnorm layernorm.rmsnorm_hf" bash "$here/gpu-sweep.sh" "$tasks"
  status=$((status | $?))
  # every skill: the 1024-point spaces, cut by pairs of choices (the rate owed since session 10)
  RUN=sweep-f SKILLS="" SWEEP_S="${RATE_S:-150}" OPS="activation.relu2 quantization.per_token_quant_fp8" \
    bash "$here/gpu-sweep.sh" "$tasks"
  exit $((status | $?))
fi
if [ -n "$run_tar" ]; then
  INTEGRATE_S="${INTEGRATE_S:-120}" bash "$here/gpu-sweep.sh" "$tasks" "$run_tar"
  status=$((status | $?))
fi
if [ -n "${AGENT:-}" ]; then
  RUN=agent-h200-owed CLIENT="${CLIENT:-claude}" bash "$here/gpu-agent.sh" "$tasks" "$AGENT"
  status=$((status | $?))
fi
RUN=sweep-d SKILLS="$pdl_off,pdl_trigger_small_grids" SWEEP_S="${SWEEP_S:-300}" OPS="moe.shuffle_weighted_sum \
lora.kimi_k2_moe_fused_gate layernorm.mhc_post_combine_norm_prefill moe.moe_align_block_size moe.mask_topk_ids \
gemm.router_gemm activation.silu_and_mul" bash "$here/gpu-sweep.sh" "$tasks"
exit $((status | $?))
