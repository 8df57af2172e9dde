# The manifest format of tools/gpu-agent.sh, read once (sourced by it and by tools/agent-check.sh):
# one submission a line, OP <tab> RATIONALE <tab> REGION=FILE ...; blank lines and lines starting
# with # are skipped.
#   each_submission MANIFEST CALLBACK   calls CALLBACK N OP RATIONALE --region R1 --region R2 ...
# (N counts from 1) in this shell, so the callback may update the caller's variables.
# shellcheck shell=bash
each_submission() {
  local manifest="$1" callback="$2" op rationale regions r n=0
  local -a flags
  while IFS=$'\t' read -r op rationale regions; do
    [ -z "$op" ] && continue
    case "$op" in \#*) continue ;; esac
    n=$((n + 1))
    flags=()
    for r in $regions; do flags+=(--region "$r"); done
    "$callback" "$n" "$op" "$rationale" "${flags[@]}"
  done < "$manifest"
}
