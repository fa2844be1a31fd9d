#!/usr/bin/env bash
# How long a CI install takes, and what the model extras add (docs/benchmarks.md, "Installing the model extras").
#
#     bench/install.sh [ROUNDS]
#
# Each round: a fresh virtualenv with `.[all,test]` (what scripts/test installs); a fresh one with everything but
# the five model extras; then the model extras added to that one. Packages come from the local pip cache and the
# configured wheel directories. The repository's committed tree is installed from a copy (git archive), so the
# working tree gets no build files.
set -euo pipefail
ROUNDS=${1:-2}
PY=${PYTHON:-python3.11}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/pkg" && git archive HEAD | tar -x -C "$work/pkg"
NO_MODELS="vision,audio,text,video,adapt,3d,photos,cluster,otel,grpc,test"

timed_install() {  # venv extras -> prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$1/bin/python" -m pip install -q -e "$work/pkg[$2]" >> "$1.log" 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

fresh() {
  rm -rf "$1"; "$PY" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
}

for round in $(seq 1 "$ROUNDS"); do
  v="$work/all"; fresh "$v"
  s=$(timed_install "$v" "all,test"); echo "round $round: .[all,test] fresh: ${s} s, $(du -sm "$v" | cut -f1) MB, load $(cut -d' ' -f1 /proc/loadavg)"
  rm -rf "$v"
  v="$work/nomodels"; fresh "$v"
  s=$(timed_install "$v" "$NO_MODELS"); echo "round $round: without the model extras fresh: ${s} s, $(du -sm "$v" | cut -f1) MB"
  s=$(timed_install "$v" "all,test"); echo "round $round: model extras added: ${s} s, $(du -sm "$v" | cut -f1) MB, load $(cut -d' ' -f1 /proc/loadavg)"
  rm -rf "$v"
done
