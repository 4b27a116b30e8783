#!/usr/bin/env bash
# The README's quick start on the 2-core developer machine, on a fresh clone: the install as typed (timed), then
# `python -m gridbench search digits` as typed, five times in turn (the first right after the install).
set -u
out=$1; mkdir -p "$out"
rm -rf /tmp/fresh-digits && git clone -q /work/main /tmp/fresh-digits && cd /tmp/fresh-digits || exit 1
{ git log -1 --format="code: %h %s"; date -u; nproc; python3 --version; } > "$out/provenance.txt"
export PIP_CACHE_DIR=/tmp/fresh-digits-pipcache; rm -rf "$PIP_CACHE_DIR"
/usr/bin/time -f "install whole %e s" bash -c 'python3 -m venv .venv && . .venv/bin/activate && pip install -q -c constraints.txt -e .' > "$out/install.txt" 2>&1
du -sh .venv >> "$out/install.txt"
. .venv/bin/activate
for i in 1 2 3 4 5; do
  /usr/bin/time -f "run-$i whole %e s" python -m gridbench search digits > "$out/run-$i.txt" 2>&1
done
grep -h "whole" "$out"/install.txt "$out"/run-*.txt > "$out/calls.txt"
