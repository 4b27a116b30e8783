# Sourced by the GPU benchmark scripts that run whole commands in one device call (fixed_costs.sh,
# prestart_gpu.sh), once they have set $out and $data: makes $out/work the working folder (and cd's into it),
# puts MNIST in Keras' cache, sets $uri (the MLflow store in $out/work) and $here (the checkout), and defines
# timed NAME COMMAND...: the command's output in $out/NAME.txt, its exit status and whole time printed and
# appended to $out/calls.txt.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$out/work; mkdir -p "$work" ~/.keras/datasets; cp -n "$data/mnist.npz" ~/.keras/datasets/; cd "$work"
uri="sqlite:///$work/mlflow.db"
timed() {  # NAME COMMAND...: its output and whole time
  local name=$1; shift
  /usr/bin/time -f "whole command %e s" "$@" >"$out/$name.txt" 2>&1
  echo "$name: rc $? $(tail -1 "$out/$name.txt")" | tee -a "$out/calls.txt"
}
