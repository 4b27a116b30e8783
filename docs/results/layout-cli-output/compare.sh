#!/usr/bin/env bash
# Runs the digits search with a checkout's venv in an empty dir; prints output with timings and ids masked.
repo=$1; out=$2
d=$(mktemp -d); cd $d
env -u KERAS_BACKEND COLUMNS=160 $repo/.venv/bin/python -m gridbench search digits > raw.txt 2>&1
sed -E 's/[0-9a-f]{32}/RUNID/g; s/[0-9]+\.[0-9]+(e-?[0-9]+)?/N/g; s/elapsed [0-9:]+/elapsed T/; s#/tmp/tmp[a-zA-Z0-9_]+#TMP#g; s/ +/ /g' raw.txt > $out
cp raw.txt $out.raw
