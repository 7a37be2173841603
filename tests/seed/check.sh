#!/bin/bash
# check.sh KILN PROGRAM.kiln EXPECTED BACKEND [kiln run options...]
# Runs `kiln run PROGRAM --backend BACKEND ...` in this folder and compares its stdout with
# EXPECTED token by token: numbers within a relative 1e-7 (the reference is float64), other
# tokens exactly. EXPECTED starting with "error:" instead wants the run to fail with a
# stderr that contains the rest of that line (a located error).
set -u
kiln=$1 prog=$2 expected=$3 backend=$4
shift 4
cd "$(dirname "$0")" || exit 2
out=$("$kiln" run "$prog" --backend "$backend" "$@" 2>/tmp/kiln_seed_err.$$)
rc=$?
err=$(cat /tmp/kiln_seed_err.$$)
rm -f /tmp/kiln_seed_err.$$
if [[ $expected == error:* ]]; then
  want=${expected#error:}
  if [[ $rc -eq 0 ]]; then echo "FAIL: $prog ran, want the error: $want"; exit 1; fi
  if [[ $err != *"$want"* ]]; then echo "FAIL: $prog: want error '$want', got '$err'"; exit 1; fi
  echo "ok: $prog fails with: $err"
  exit 0
fi
if [[ $rc -ne 0 ]]; then echo "FAIL: $prog ($backend) exited $rc: $err"; exit 1; fi
tok() { tr '[](),=' '      ' | tr -s ' \n' '\n\n' | sed '/^$/d'; }
paste <(printf '%s\n' "$out" | tok) <(tok < "$expected") | awk -F'\t' '
  function isnum(s) { return s ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ || s ~ /^-?(inf|nan)$/ }
  { n++
    if ($1 == $2) next
    if (isnum($1) && isnum($2)) { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2
      if (d <= 1e-7 * (m > 1 ? m : 1)) next }
    printf "FAIL: token %d: got \"%s\", want \"%s\"\n", n, $1, $2; bad = 1; exit 1 }
  END { if (!bad) printf "ok: %d tokens match\n", n; exit bad }'
