# shell_checks.sh: the checks the shell tests share (sourced). Counts in
# $pass and $fail; the command's output in $out.
pass=0; fail=0
check() { # check NAME WANT_RC CMD... ; output in $out
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); local rc=$?
  if [ "$rc" -eq "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name: exit $rc, want $want: $(echo "$out" | head -3)"; fi
}
has() { # has NAME TEXT
  if echo "$out" | grep -qF -- "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: no '$2' in: $(echo "$out" | head -3)"; fi
}
cuda_gpus() { # cuda_gpus RILL: the GPUs CUDA lets this process use (CUDA_VISIBLE_DEVICES counts), 0 without cuda
  "$1" version 2> /dev/null | sed -n 's/^cuda: usable: \([0-9]*\) device.*/\1/p' | grep . || echo 0
}
