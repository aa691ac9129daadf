#!/bin/sh
# find_proto.sh: prints the onnx.proto that Debian's libonnx-dev installs,
# looked for under each include folder of $CPATH (a tree of unpacked
# packages) and then /usr/include; prints nothing when there is none.
IFS=:
for d in $CPATH /usr/include; do
  if [ -n "$d" ] && [ -f "$d/onnx/onnx.proto" ]; then echo "$d/onnx/onnx.proto"; exit 0; fi
done
exit 0
