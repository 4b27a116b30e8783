#!/usr/bin/env bash
# On the 2-core machine (no GPU), e02d9f1 (where plain workers were the default; opt-in since): 4 pairs of a small CPU
# search of mnist (2 trials, 2 epochs), Tune's actors on plain workers (GRIDBENCH_PLAIN_WORKERS=1) and with Tune's
# runtime_env (0), the order alternating;
# each search's output in run-MODE-I.txt, its summary lines in summary.txt. Usage: DATA_DIR=/abs/path/to/shared/data
# bash commands.sh (run as DATA_DIR=/work/shared/data).
out=$(cd "$(dirname "$0")" && pwd); work=$(mktemp -d); cd "$work" || exit 1
for i in 1 2 3 4; do
  order="1 0"; [ $((i % 2)) = 0 ] && order="0 1"
  for mode in $order; do
    /usr/bin/time -f "whole command %e s" env GRIDBENCH_PLAIN_WORKERS=$mode KERAS_BACKEND=jax python -m gridbench search mnist \
      --device cpu --data-dir "${DATA_DIR:?an absolute path to the folder holding mnist.npz}" --set epochs=2 --grid hidden_units=64 --grid batch_size=256 \
      --tracking-uri "sqlite:///$work/mlflow.db" > "$out/run-$mode-$i.txt" 2>&1
    { echo "plain=$mode pair $i:"; grep -E "first trial started|^whole command" "$out/run-$mode-$i.txt"; } >> "$out/summary.txt"
  done
done
rm -rf "$work"
