#!/usr/bin/env bash
# check_layers.sh — checks that Kiln's source folders depend on each other in one direction.
#
# The folders form layers, earliest first (LAYERS below). A folder may use its own layer and
# earlier ones; an edge to a later layer is a "backward edge". Two kinds of edges are found:
#
#   include  a quoted `#include "..."` in a .c/.h/.inc/.def file that resolves to a file of
#            another folder. A name is resolved as the compiler does with Kiln's -I flags: next
#            to the including file first, then under include/, then under the repository root.
#   call     a reference to a function defined (non-static, at column 0) in a later folder,
#            from a file of an earlier folder: a call, a declaration in a header, or a function
#            named in a table such as ir/ops.def. Comments and string literals are ignored.
#            include/kiln/ is not checked for calls: public headers declare functions that
#            every other folder may implement.
#
# Every backward edge must be listed in ALLOW with the reason it is still there. The script
# exits 1 when it finds a backward edge that is not listed, and says which ALLOW lines are
# no longer needed.
#
# Usage: tools/check_layers.sh [-v] [-o "include/kiln ir frontend,layers ..."]
#   -v   list every backward call reference (file: symbols), not only a summary per file
#   -o   another layer order; folders of one layer are joined with commas
# Needs bash, awk, sort and tr; git lists the files (tracked and untracked, not ignored), find
# does where there is no git. Takes about half a second.

set -euo pipefail

# The intended order, earliest first; folders joined by a comma form one layer. DESIGN.md has
# frontend (which the layer catalogue, layers/, belongs to) depend on ir only, and the includes
# agree: frontend/ includes ir/, layers/ and include/kiln/; layers/ includes ir/ and
# include/kiln/. train/ includes layers/, passes/ and ir/, so it comes after them. Host tensors
# and parameter sets are plain data in ir/ (ir/tensor.c, ir/params.c), and ONNX constant folding
# runs the reference interpreter, so neither frontend/ nor layers/ calls into runtime/.
# runtime/ has four jobs, each its own folder: exec/ (the LLVM-free CPU executor that compiled
# shared objects carry), io/ (.npy and safetensors files), device/ (the GPU devices and the
# device table) and driver/ (the JIT, `kiln compile` and `kiln run`, which use all three).
# program/ runs .kiln programs (`kiln run PROGRAM.kiln`): it evaluates with frontend/, runs
# graphs through runtime/ and trains with train/, so it comes after all of them; frontend/
# reaches it only through function pointers (ke_hooks in frontend/kiln_eval.h).
LAYERS="include/kiln ir frontend,layers passes codegen runtime/exec runtime/io runtime/device runtime/driver train program tools"

# Backward edges that are tolerated, none today (issue 21 removed the last ones). One line each:
#   KIND FROM -> TO  # why it is still there
# Remove a line once its edge is gone; the script says when a line matches nothing.
ALLOW='
'

verbose=0
while [ $# -gt 0 ]; do
  case "$1" in
    -v) verbose=1 ;;
    -o) shift; LAYERS="${1:?-o needs a layer order}" ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "check_layers.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "$0")/.."

# The folders of all layers, in order, for the file list.
folders=$(printf '%s\n' "$LAYERS" | tr -s ' ,' '\n')
# shellcheck disable=SC2086
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files -co --exclude-standard -- $folders)
else
  files=$(find $folders -type f)
fi
files=$(printf '%s\n' "$files" | awk '/\.(c|h|inc|def)$/ && !/(^|\/)build[^\/]*\//' | sort -u)
if [ -z "$files" ]; then
  echo "check_layers.sh: no .c/.h/.inc/.def files under: $folders" >&2
  exit 2
fi

# One awk program reads every file once.
# shellcheck disable=SC2086
awk -v layers="$LAYERS" -v allow="$ALLOW" -v verbose="$verbose" -v filelist="$files" '
function folder(path,   p) {
  if (path ~ /^include\/kiln\//) return "include/kiln"
  if (path ~ /^runtime\/[^\/]+\//) { p = path; sub(/^runtime\//, "", p); sub(/\/.*/, "", p); return "runtime/" p }
  p = path; sub(/\/.*/, "", p); return p
}
# Splits a space-separated list into arr, sorted (insertion sort: the lists are short).
function isort(list, arr,   n, i, j, v) {
  n = split(substr(list, 2), arr, " ")
  for (i = 2; i <= n; i++) { v = arr[i]; j = i - 1; while (j >= 1 && arr[j] > v) { arr[j + 1] = arr[j]; j-- } arr[j + 1] = v }
  return n
}
function dirname(path,   p) { p = path; sub(/\/[^\/]*$/, "", p); return p }
# Removes comments and string/char literals from one line; in_comment carries over lines.
function strip(s,   out, i, c, n, q) {
  out = ""; n = length(s); i = 1
  while (i <= n) {
    c = substr(s, i, 1)
    if (in_comment) {
      if (c == "*" && substr(s, i + 1, 1) == "/") { in_comment = 0; i += 2; out = out " " }
      else i++
      continue
    }
    if (c == "/" && substr(s, i + 1, 1) == "*") { in_comment = 1; i += 2; continue }
    if (c == "/" && substr(s, i + 1, 1) == "/") break
    if (c == "\"" || c == "\047") {
      q = c; i++
      while (i <= n && substr(s, i, 1) != q) { if (substr(s, i, 1) == "\\") i++; i++ }
      i++; out = out " "; continue
    }
    out = out c; i++
  }
  return out
}
# Looks for the end of a pending definition header: balanced parentheses, then { or ;.
function scan_pending(s,   i, n, c) {
  n = length(s)
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1)
    if (depth > 0) { if (c == "(") depth++; else if (c == ")") depth--; continue }
    if (c == "{") {
      if (!((pending, cur_folder) in deffile)) { defs[pending] = defs[pending] SUBSEP cur_folder; deffile[pending, cur_folder] = FILENAME }
      pending = ""; return
    }
    if (c == ";" || c == "=" || c == ",") { pending = ""; return }
  }
}
BEGIN {
  nl = split(layers, L, " ")
  for (i = 1; i <= nl; i++) {
    nf = split(L[i], F, ",")
    for (j = 1; j <= nf; j++) { rank[F[j]] = i; order[++norder] = F[j] }
  }
  nfl = split(filelist, FL, "\n")
  for (i = 1; i <= nfl; i++) if (FL[i] != "") exists[FL[i]] = 1
  na = split(allow, A, "\n")
  for (i = 1; i <= na; i++) {
    line = A[i]; sub(/#.*/, "", line)
    if (split(line, w, " ") >= 4) { key = w[1] " " w[2] " -> " w[4]; allowed[key] = 1; allow_order[++nallow] = key }
  }
}
FNR == 1 { cur_folder = folder(FILENAME); in_comment = 0; pending = ""; depth = 0 }
{
  raw = $0
  if (!in_comment && raw ~ /^[ \t]*#[ \t]*include[ \t]*"/) {
    inc = raw; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    d = dirname(FILENAME) "/" inc
    if (d in exists) target = d
    else if (("include/" inc) in exists) target = "include/" inc
    else if (inc in exists) target = inc
    else target = ""
    if (target != "") {
      tf = folder(target)
      if (tf != cur_folder) {
        e = cur_folder SUBSEP tf
        if (!(e in inc_count)) inc_example[e] = FILENAME " includes " target
        inc_count[e]++
      }
    } else if (!((FILENAME, inc) in unres_seen)) { unres_seen[FILENAME, inc] = 1; unresolved = unresolved " " FILENAME "|" inc }
    next
  }
  s = strip(raw)
  if (s ~ /^[ \t]*#/) { if (s !~ /^[ \t]*#[ \t]*define/) next }
  # Definitions: non-static, column 0, in .c and .inc files.
  if (pending != "") scan_pending(s)
  else if (FILENAME ~ /\.(c|inc)$/ && s ~ /^[A-Za-z_][A-Za-z0-9_]*[ \t*]/ &&
      s !~ /^(static|typedef|extern|return|if|else|while|for|switch|do|case|goto|struct [A-Za-z0-9_]+ *\{|enum|union)[^A-Za-z0-9_]/ &&
      match(s, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
    head = substr(s, 1, RSTART - 1)
    if (head ~ /^[A-Za-z_][A-Za-z0-9_ \t*]*[ \t*]$/ && head !~ /=/) {
      name = substr(s, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name)
      pending = name; depth = 1
      scan_pending(substr(s, RSTART + RLENGTH))
    }
  }
  # Identifiers used by this file.
  if (cur_folder == "include/kiln") next
  gsub(/[^A-Za-z0-9_]+/, " ", s)
  n = split(s, T, " ")
  for (i = 1; i <= n; i++) if (T[i] ~ /^[A-Za-z_]/) used[FILENAME SUBSEP T[i]] = 1
}
END {
  # Include edges, in layer order.
  printf "layers, earliest first: %s\n", layers
  print ""
  print "== include edges between folders (count of #include lines, one example)"
  for (i = 1; i <= norder; i++) for (j = 1; j <= norder; j++) {
    e = order[i] SUBSEP order[j]
    if (!(e in inc_count)) continue
    back = rank[order[j]] > rank[order[i]]
    printf "  %-12s -> %-12s %4d  (%s)%s\n", order[i], order[j], inc_count[e], inc_example[e], back ? "  BACKWARD" : ""
    if (back) backward["include " order[i] " -> " order[j]] = inc_count[e] " #include line" (inc_count[e] == 1 ? "" : "s") ", e.g. " inc_example[e]
  }
  # Call edges: a file uses a name that only later folders define.
  for (k in used) {
    split(k, p, SUBSEP); f = p[1]; sym = p[2]
    if (!(sym in defs)) continue
    ff = folder(f); best = ""; mine = 0
    nd = split(defs[sym], D, SUBSEP)
    for (i = 2; i <= nd; i++) { if (D[i] == ff) mine = 1; if (best == "" || rank[D[i]] < rank[best]) best = D[i] }
    if (mine || rank[best] <= rank[ff]) continue
    e = ff SUBSEP best; df = deffile[sym, best]
    ref[e, f, df] = ref[e, f, df] " " sym
    if (!((e, f) in reffile)) { reffile[e, f] = 1; files_of[e] = files_of[e] " " f }
    if (!((e, f, df) in refpair)) { refpair[e, f, df] = 1; defs_of[e, f] = defs_of[e, f] " " df }
    if (!((e, sym) in symseen)) { symseen[e, sym] = 1; nsyms[e]++ }
  }
  print ""
  print "== backward call edges (functions defined in a later folder, named in an earlier one)"
  ncall = 0
  for (i = 1; i <= norder; i++) for (j = 1; j <= norder; j++) {
    e = order[i] SUBSEP order[j]
    if (!(e in nsyms)) continue
    ncall++
    m = isort(files_of[e], U)
    printf "  %-12s -> %-12s %d function%s, named in %d file%s\n", order[i], order[j], nsyms[e], nsyms[e] == 1 ? "" : "s", m, m == 1 ? "" : "s"
    for (x = 1; x <= m; x++) {
      nd = isort(defs_of[e, U[x]], DF)
      for (y = 1; y <= nd; y++) {
        if (!verbose && y > 3) { printf "      %-26s ... and %d more files (-v)\n", "", nd - 3; break }
        ns = isort(ref[e, U[x], DF[y]], S)
        list = ""
        for (a = 1; a <= ns && (verbose || a <= 5); a++) list = list " " S[a]
        if (a <= ns) list = list sprintf(" +%d more (-v)", ns - a + 1)
        printf "      %-26s %s:%s\n", y == 1 ? U[x] : "", DF[y], list
        if (x == 1 && y == 1) example = S[1] " (" DF[y] ") in " U[x]
      }
    }
    backward["call " order[i] " -> " order[j]] = nsyms[e] " function" (nsyms[e] == 1 ? "" : "s") ", e.g. " example
  }
  if (!ncall) print "  (none)"

  print ""
  print "== backward edges"
  bad = 0
  for (i = 1; i <= norder; i++) for (j = 1; j <= norder; j++) for (kind = 1; kind <= 2; kind++) {
    key = (kind == 1 ? "include " : "call ") order[i] " -> " order[j]
    if (!(key in backward)) continue
    if (key in allowed) printf "  allowed     %-32s %s\n", key, backward[key]
    else { printf "  NOT ALLOWED %-32s %s\n", key, backward[key]; bad++ }
  }
  stale = 0
  for (i = 1; i <= nallow; i++) if (!(allow_order[i] in backward)) {
    if (!stale++) { print ""; print "== ALLOW lines that match no edge any more (remove them)" }
    print "  " allow_order[i]
  }
  nu = isort(unresolved, UR)
  if (nu) { print ""; printf "== quoted includes that name no file of these folders (generated or external), ignored\n"
    for (x = 1; x <= nu; x++) { split(UR[x], P3, "|"); printf "  %s includes \"%s\"\n", P3[1], P3[2] } }
  print ""
  if (bad) { printf "FAIL: %d backward edge(s) not in ALLOW (tools/check_layers.sh)\n", bad; exit 1 }
  print "OK: every backward edge is in ALLOW"
}
' $files
