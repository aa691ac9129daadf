#!/bin/bash
# test_ranks.sh RILL TESTS_DIR: ranks over loopback (spec/cli.md, docs/ranks.md):
# rill launch, the rank options and a launcher's variables, disagreeing
# modules, bad options, a rank that fails, is killed or does not answer.
# Every job here ends within seconds (short --collective-timeout).
rill=$1; fix=$2/fixtures
tmp=$(mktemp -d); busy=; victim=; trap 'kill -9 $(jobs -p) $busy $victim 2>/dev/null; rm -rf "$tmp"' EXIT
. "$2/shell_checks.sh"
cp "$fix"/lowered.vmasm "$fix"/control.vmasm "$fix"/spin.vmasm "$fix"/collectives.vmasm "$fix"/p2p.vmasm "$fix"/p2p_loop.vmasm "$tmp"/
cd "$tmp" || exit 1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# a port nobody listens on now
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
in4=(--device=cpu --input='f32[4]=1,2,3,4')

# rill launch: four ranks of one program; each writes its own result (%r), and they agree.
check launch-4 0 "$rill" launch -n 4 "$rill" run lowered.vmasm "${in4[@]}" --output=@out%r.npy
for r in 0 1 2 3; do [ -f out$r.npy ] && ok || bad "rank $r wrote no out$r.npy"; done
cmp -s out0.npy out1.npy && cmp -s out0.npy out2.npy && cmp -s out0.npy out3.npy && ok || bad "the ranks' results differ"
check launch-alone 0 "$rill" run lowered.vmasm "${in4[@]}" --expected-output=@out0.npy
# only rank 0 prints; a path without %r is rank 0's alone
check launch-print 0 "$rill" launch -n 3 "$rill" run lowered.vmasm "${in4[@]}"
[ "$(echo "$out" | grep -c 'result\[0\]: f32\[4\] = \[4, 8, 12, 16\]')" = 1 ] && ok || bad "launch-print: not one result printed: $out"
check launch-one-file 0 "$rill" launch -n 3 "$rill" run lowered.vmasm "${in4[@]}" --output=@one.npy --expected-output='f32[4]=4 8 12 16'
[ -f one.npy ] && ok || bad "launch-one-file: rank 0 wrote no one.npy"
check launch-bench 0 "$rill" launch -n 2 "$rill" bench lowered.vmasm --device=cpu --iterations=2 --warmup=0
[ "$(echo "$out" | grep -c 'iterations')" = 1 ] && ok || bad "launch-bench: not rank 0 alone printed figures: $out"
# the variables each rank gets
check launch-env 0 "$rill" launch -n 2 --port=4242 sh -c 'echo "rank $RANK of $WORLD_SIZE local $LOCAL_RANK at $MASTER_ADDR:$MASTER_PORT"'
has launch-env "rank 0 of 2 local 0 at 127.0.0.1:4242"; has launch-env "rank 1 of 2 local 1 at 127.0.0.1:4242"

# A launcher's variables: torchrun's, Open MPI's and Slurm's; options override them.
p=$(port)
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p "$rill" run lowered.vmasm "${in4[@]}" --output=@tr1.npy > tr1.log 2>&1 &
check env-torchrun 0 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p "$rill" run lowered.vmasm "${in4[@]}" --output=@tr0.npy
wait $! && ok || bad "env-torchrun rank 1: $(cat tr1.log)"
[ -f tr0.npy ] && [ ! -f tr1.npy ] && ok || bad "env-torchrun: a path without %r is rank 0's alone"
p=$(port)
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "$rill" run lowered.vmasm "${in4[@]}" --rendezvous=tcp://127.0.0.1:$p --output=@mpi%r.npy > mpi1.log 2>&1 &
check env-mpirun 0 env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "$rill" run lowered.vmasm "${in4[@]}" --rendezvous=tcp://127.0.0.1:$p --output=@mpi%r.npy
wait $! && ok || bad "env-mpirun rank 1: $(cat mpi1.log)"
[ -f mpi0.npy ] && [ -f mpi1.npy ] && ok || bad "env-mpirun: each rank's file"
p=$(port)
SLURM_PROCID=1 SLURM_NTASKS=2 MASTER_ADDR=localhost MASTER_PORT=$p "$rill" run lowered.vmasm "${in4[@]}" > slurm1.log 2>&1 &
check env-srun 0 env SLURM_PROCID=0 SLURM_NTASKS=2 MASTER_ADDR=localhost MASTER_PORT=$p "$rill" run lowered.vmasm "${in4[@]}"
wait $! && ok || bad "env-srun rank 1: $(cat slurm1.log)"
# options win: the variables say rank 3 of 4, the options rank 1 of 2
p=$(port)
RANK=3 WORLD_SIZE=4 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1 --rendezvous=tcp://127.0.0.1:$p > opt1.log 2>&1 &
check env-overridden 0 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1:$p
wait $! && ok || bad "env-overridden rank 1: $(cat opt1.log)"
# IPv6 literals in brackets, and this machine's name (rank 0 listens on every interface for a name)
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  p=$(port)
  "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1 --rendezvous="tcp://[::1]:$p" > v6.log 2>&1 &
  check rendezvous-ipv6 0 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous="tcp://[::1]:$p"
  wait $! && ok || bad "rendezvous-ipv6 rank 1: $(cat v6.log)"
fi
p=$(port)
"$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1 --rendezvous="tcp://$(hostname):$p" > name.log 2>&1 &
check rendezvous-name 0 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous="tcp://$(hostname):$p"
wait $! && ok || bad "rendezvous-name rank 1: $(cat name.log)"
check env-ranks-1 0 env RANK=3 WORLD_SIZE=4 "$rill" run lowered.vmasm "${in4[@]}" --ranks=1
has env-ranks-1 "result[0]: f32[4] = [4, 8, 12, 16]"

# Bad options and variables: exit 2 with a message.
check bad-ranks 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=0 --rank=0; has bad-ranks "--ranks expects 1..65536 ranks, got '0'"
check bad-rank 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=4 --rank=4 --rendezvous=tcp://127.0.0.1:4000; has bad-rank "--rank=4 is out of the job's ranks 0..3"
check bad-rank-alone 2 "$rill" run lowered.vmasm "${in4[@]}" --rank=1; has bad-rank-alone "--rank needs --ranks=N"
check bad-address 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=http://127.0.0.1:4000; has bad-address "--rendezvous expects tcp://HOST:PORT"
check bad-port 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1:70000; has bad-port "expects tcp://HOST:PORT"
check no-port 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1; has no-port "expects tcp://HOST:PORT"
check no-address 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1; has no-address "needs rank 0's address: --rendezvous=tcp://HOST:PORT, or MASTER_ADDR and MASTER_PORT"
check no-rank-var 2 env WORLD_SIZE=2 "$rill" run lowered.vmasm "${in4[@]}"; has no-rank-var "WORLD_SIZE is set (2) but RANK is not"
check bad-rank-var 2 env WORLD_SIZE=2 RANK=x MASTER_ADDR=127.0.0.1 MASTER_PORT=4000 "$rill" run lowered.vmasm "${in4[@]}"; has bad-rank-var "RANK expects a rank 0..1, got 'x'"
check bad-timeout 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1:4000 --collective-timeout=-1
has bad-timeout "--collective-timeout expects seconds"
check bad-host 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1 --rendezvous=tcp://no-such-host.invalid:4000 --collective-timeout=2
has bad-host "cannot resolve no-such-host.invalid"
t0=$SECONDS
check unreachable 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=1 --rendezvous=tcp://127.0.0.1:$(port) --collective-timeout=1
has unreachable "did not complete within 1 s: rank 0 did not arrive"
[ $((SECONDS - t0)) -le 8 ] && ok || bad "unreachable took $((SECONDS - t0)) s"
check missing-ranks 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=3 --rank=0 --rendezvous=tcp://127.0.0.1:$(port) --collective-timeout=1
has missing-ranks "ranks 1, 2 did not arrive"
check launch-no-n 2 "$rill" launch "$rill" version; has launch-no-n "needs -n N"
check launch-bad-n 2 "$rill" launch -n 0 "$rill" version; has launch-bad-n "-n expects 1..1024 ranks"
check launch-no-command 2 "$rill" launch -n 2; has launch-no-command "usage: rill launch"
check launch-bad-command 2 "$rill" launch -n 2 ./no-such-program; has launch-bad-command "cannot start './no-such-program' as rank 0"
check launch-bad-option 2 "$rill" launch -n 2 --frob "$rill" version; has launch-bad-option "unknown option --frob"

# Ranks running different modules are refused at start, on every rank, naming them.
p=$(port)
"$rill" run control.vmasm --device=cpu --input='f32[4]=1' --input='bool[]=1' --ranks=2 --rank=1 --rendezvous=tcp://127.0.0.1:$p > mm1.log 2>&1 &
k=$!
check modules-differ 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1:$p --collective-timeout=10
has modules-differ "the job's ranks do not agree: rank 1 runs a different module (hash"
wait $k; [ $? = 2 ] && grep -q "rank 1 runs a different module" mm1.log && ok || bad "modules-differ rank 1: $(cat mm1.log)"
# the same for a job size that differs
p=$(port)
"$rill" run lowered.vmasm "${in4[@]}" --ranks=3 --rank=1 --rendezvous=tcp://127.0.0.1:$p > sz1.log 2>&1 &
k=$!
check sizes-differ 2 "$rill" run lowered.vmasm "${in4[@]}" --ranks=2 --rank=0 --rendezvous=tcp://127.0.0.1:$p --collective-timeout=10
has sizes-differ "rank 1 says the job has 3 ranks, rank 0 says 2"
wait $k; [ $? = 2 ] && ok || bad "sizes-differ rank 1: $(cat sz1.log)"

# A rank whose run fails aborts the job: the others fail at once, naming it; launch gives the first non-zero status.
t0=$SECONDS
check launch-rank-fails 2 "$rill" launch -n 3 sh -c 'if [ "$RANK" = 1 ]; then exec "$0" run spin.vmasm --device=cpu --input="f32[4]=x"; fi
  exec "$0" run spin.vmasm --device=cpu --input="f32[4]=1" --input="i64[]=3" --collective-timeout=20' "$rill"
has launch-rank-fails "rank 1 exited with status 2"; has launch-rank-fails "rank 1 aborted the job: its run failed (exit 2)"
[ $((SECONDS - t0)) -le 15 ] && ok || bad "launch-rank-fails took $((SECONDS - t0)) s"
# exit statuses: the first non-zero one; the others are ended after the grace period
t0=$SECONDS
check launch-grace 3 "$rill" launch -n 3 --grace=0.5 sh -c 'if [ "$RANK" = 2 ]; then exit 3; fi; sleep 30; echo never'
has launch-grace "rank 2 exited with status 3"; has launch-grace "sending SIGTERM"
[ $((SECONDS - t0)) -le 10 ] && ok || bad "launch-grace took $((SECONDS - t0)) s"
# SIGTERM to rill launch reaches every rank
"$rill" launch -n 2 sleep 30 > term.log 2>&1 &
k=$!; sleep 0.5; kill -TERM $k; t0=$SECONDS
wait $k; rc=$?
[ $rc = 143 ] && [ $((SECONDS - t0)) -le 6 ] && ok || bad "launch-sigterm: exit $rc after $((SECONDS - t0)) s: $(cat term.log)"

# A rank that does not answer (busy in a long loop): the others' end-of-run barrier times out naming it.
p=$(port)
spin=(spin.vmasm --device=cpu --input='f32[4]=1' --ranks=3 --rendezvous=tcp://127.0.0.1:$p)
"$rill" run "${spin[@]}" --input='i64[]=1000000000' --rank=2 > busy2.log 2>&1 &
busy=$!; disown $busy  # killed below; no job notice
"$rill" run "${spin[@]}" --input='i64[]=2' --rank=1 --collective-timeout=1 > busy1.log 2>&1 &
k=$!
t0=$SECONDS
check silent-rank 1 "$rill" run "${spin[@]}" --input='i64[]=2' --rank=0 --collective-timeout=1
has silent-rank "allgather 1: rank 2 did not answer within 1 s"
wait $k; [ $? = 1 ] && grep -q "rank 2 did not answer" busy1.log && ok || bad "silent-rank rank 1: $(cat busy1.log)"
[ $((SECONDS - t0)) -le 10 ] && ok || bad "silent-rank took $((SECONDS - t0)) s"
kill -9 $busy 2>/dev/null

# A rank killed with SIGKILL: every other rank gets a status within seconds, naming it.
p=$(port)
spin=(spin.vmasm --device=cpu --input='f32[4]=1' --ranks=4 --rendezvous=tcp://127.0.0.1:$p --collective-timeout=60)
"$rill" run "${spin[@]}" --input='i64[]=1000000000' --rank=2 > kill2.log 2>&1 &
victim=$!; disown $victim
for r in 1 3; do "$rill" run "${spin[@]}" --input='i64[]=2' --rank=$r > kill$r.log 2>&1 & eval k$r=$!; done
"$rill" run "${spin[@]}" --input='i64[]=2' --rank=0 > kill0.log 2>&1 &
k0=$!
sleep 1.5; kill -9 $victim; t0=$SECONDS
for r in 0 1 3; do
  eval "wait \$k$r"; rc=$?
  [ $rc = 1 ] && grep -q "rank 2 closed its connection without leaving the job (its process died or was killed" kill$r.log && ok ||
    bad "killed rank: rank $r exit $rc: $(cat kill$r.log)"
done
[ $((SECONDS - t0)) -le 8 ] && ok || bad "killed rank: the others took $((SECONDS - t0)) s"
# the same under rill launch: its status is the killed rank's
rm -f pid
"$rill" launch -n 3 --grace=2 sh -c 'if [ "$RANK" = 2 ]; then echo $$ > pid; exec "$0" run spin.vmasm --device=cpu --input="f32[4]=1" --input="i64[]=1000000000"; fi
  exec "$0" run spin.vmasm --device=cpu --input="f32[4]=1" --input="i64[]=2" --collective-timeout=60' "$rill" > launchkill.log 2>&1 &
k=$!
for i in $(seq 50); do [ -s pid ] && break; sleep 0.1; done
sleep 1; kill -9 "$(cat pid)"; t0=$SECONDS
wait $k; rc=$?
[ $rc = 137 ] && ok || bad "launch-kill: exit $rc, want 137: $(cat launchkill.log)"
grep -q "rank 2 was killed by signal 9" launchkill.log && ok || bad "launch-kill: no message: $(cat launchkill.log)"
[ "$(grep -c 'rank 2 closed its connection' launchkill.log)" = 2 ] && ok || bad "launch-kill: ranks 0 and 1 not told: $(cat launchkill.log)"
[ $((SECONDS - t0)) -le 8 ] && ok || bad "launch-kill took $((SECONDS - t0)) s"

# Help names the options.
# collectives over the job (docs/collectives.md): all_reduce and all_gather of x + rank on four ranks, by hand
check launch-coll 0 "$rill" launch -n 4 "$rill" run collectives.vmasm "${in4[@]}"
echo "$out" | grep -q 'result\[0\]: f32\[4\] = \[10, 14, 18, 22\]' && ok || bad "launch-coll: the sum: $out"
echo "$out" | grep -q 'result\[2\]: f32\[16\] = \[1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 4, 5, 6, 7\]' && ok || bad "launch-coll: the gather: $out"
check coll-alone 1 "$rill" run collectives.vmasm "${in4[@]}"; has coll-alone "all_gather {ranks=4} runs in a job of 1 rank"
# send/recv over the job (docs/collectives.md): a ring of x + rank, and back; every rank checks its own
# results (rank r gets x + (r - 1) mod 4, then its own x + r back), interpreted and as graphs
for g in off on; do
  check launch-p2p-$g 0 "$rill" launch -n 4 sh -c 'p=$(( (RANK + 3) % 4 )); exec "$0" run p2p.vmasm --device=cpu --input="f32[4]=1,2,3,4" --graph=$1 \
    --expected-output="f32[4]=$((1 + p)) $((2 + p)) $((3 + p)) $((4 + p))" --expected-output="f32[4]=$((1 + RANK)) $((2 + RANK)) $((3 + RANK)) $((4 + RANK))"' "$rill" $g
done
# in a while loop (a conditional node in the graph): N steps on N ranks bring x + rank + N back
for g in off on; do
  check launch-p2p-loop-$g 0 "$rill" launch -n 3 sh -c 'exec "$0" run p2p_loop.vmasm --device=cpu --input="f32[4]=1,2,3,4" --graph=$1 \
    --expected-output="f32[4]=$((4 + RANK)) $((5 + RANK)) $((6 + RANK)) $((7 + RANK))"' "$rill" $g
done
check launch-p2p-print 0 "$rill" launch -n 4 "$rill" run p2p.vmasm "${in4[@]}"
has launch-p2p-print "result[0]: f32[4] = [4, 5, 6, 7]"; has launch-p2p-print "result[1]: f32[4] = [1, 2, 3, 4]"
check launch-p2p-2 0 "$rill" launch -n 2 "$rill" run p2p.vmasm "${in4[@]}" --graph=on
has launch-p2p-2 "result[0]: f32[4] = [2, 3, 4, 5]"; has launch-p2p-2 "result[1]: f32[4] = [1, 2, 3, 4]"
check p2p-alone 1 "$rill" run p2p.vmasm "${in4[@]}"; has p2p-alone "send {shift=1} on rank 0 of a job of 1 rank is rank 0 itself"
printf 'func @main(%%x: f32[4]) -> f32[4] {\n  %%y = recv() {shift=1, dtype=f32, shape=[4]}\n  return %%y\n}\n' > nosend.vmasm
t0=$SECONDS
check launch-p2p-nosend 1 "$rill" launch -n 2 "$rill" run nosend.vmasm "${in4[@]}" --collective-timeout=1
has launch-p2p-nosend "got nothing within 1 s"
[ $((SECONDS - t0)) -le 8 ] && ok || bad "launch-p2p-nosend took $((SECONDS - t0)) s"
check help-run 0 "$rill" run --help; has help-run "--rendezvous=tcp://HOST:PORT"; has help-run "--collective-timeout=SECONDS"
check help-launch 0 "$rill" launch --help; has help-launch "-n=N"

echo "ranks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
