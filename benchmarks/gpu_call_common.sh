# Sourced by the GPU benchmark scripts that run whole commands in one device call (fixed_costs.sh,
# prestart_gpu.sh), once they have set $out and $data: makes $out/work the working folder (and cd's into it),
# copies $data, $bench and $before (where set) into it and points them at the copies,
# puts MNIST in Keras' cache, sets $uri (the MLflow store in $out/work) and $here (the checkout), and defines
# timed NAME COMMAND...: the command's output in $out/NAME.txt, its exit status and whole time printed and
# appended to $out/calls.txt.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$out/work; mkdir -p "$work" ~/.keras/datasets
# $data, $bench and $before are often ignored folders of the checkout, which a later device call that does not carry
# them takes away while this job runs (docs/results/around-training/h200x4-362e02f/README.txt): this script works from
# copies made as it starts (a later script of the same job makes its own, so carry them still, or copy them first).
for input in data bench before; do
  source_dir=${!input:-}
  case $source_dir in "" | "$work/inputs/"*) continue ;; esac  # unset, or a copy already (sourced twice)
  mkdir -p "$work/inputs" && rm -rf "$work/inputs/$input.new"
  cp -r "$source_dir" "$work/inputs/$input.new" && rm -rf "$work/inputs/$input" \
    && mv "$work/inputs/$input.new" "$work/inputs/$input" && printf -v "$input" %s "$work/inputs/$input"
done
cp -n "$data/mnist.npz" ~/.keras/datasets/; cd "$work"
uri="sqlite:///$work/mlflow.db"
timed() {  # NAME COMMAND...: its output and whole time
  local name=$1; shift
  /usr/bin/time -f "whole command %e s" "$@" >"$out/$name.txt" 2>&1
  echo "$name: rc $? $(tail -1 "$out/$name.txt")" | tee -a "$out/calls.txt"
}
