#!/bin/bash
# run_conformance.sh RILL DIR [dynamic]: the shared conformance cases on the
# CPU, and a short module mutation run; with `dynamic`, the cases with shape
# variables (DIR/dynamic, which the default run skips). Skips (exit 77) when
# DIR is not there.
rill=$1; dir=$2
if [ ! -f "$dir/run.sh" ]; then echo "skipped: no conformance cases at $dir"; exit 77; fi
if [ "$3" = dynamic ]; then
  if [ ! -d "$dir/dynamic" ]; then echo "skipped: no dynamic cases at $dir/dynamic"; exit 77; fi
  exec bash "$dir/run.sh" "$rill" "$dir/dynamic" cpu
fi
bash "$dir/run.sh" "$rill" "$dir" cpu || exit 1
# programs over several devices (their args name cpu:0,cpu:1,...)
if [ -d "$dir/devices" ]; then bash "$dir/run.sh" "$rill" "$dir/devices" cpu || exit 1; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r "$dir/while_f32" "$tmp/" && chmod -R u+w "$tmp"
bash "$dir/fuzz_vmbc.sh" "$rill" "$tmp/while_f32" 60
