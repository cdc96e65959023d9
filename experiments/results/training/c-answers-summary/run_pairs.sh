#!/bin/bash
# Interleaved before/after sweeps for the C-answers question. Usage: gfE-run.sh PAIRS
set -u
RES=/work/main/experiments/results/training
LOG=/tmp/gfE-run.log
run_one() {  # tree n
  local tree=$1 n=$2 out=$RES/c-answers-$1-$2 cnt=/tmp/gfE-counters/$1-$2
  mkdir -p $cnt
  echo "$(date -u +%H:%M:%S) start $tree-$n uptime: $(uptime)" >> $LOG
  ( cd /tmp/gfE-$tree && PYTHONPATH=/tmp/gfE-$tree:/tmp/gfE-probe GFE_COUNTERS=$cnt \
    flock /tmp/gradfabric-netns.lock /work/main/.venv/bin/python -m gradfabric.command.cli experiment trace \
    --scenarios lossy-0.1 --configs ddp-tcp,dlcp,dlcp-merged --repetitions 1 --iterations 10 --starved-share 1 \
    --out $out ) > /tmp/gfE-$tree-$n.out 2>&1
  local rc=$?
  echo "$(date -u +%H:%M:%S) end $tree-$n rc=$rc uptime: $(uptime)" >> $LOG
  if [ -d $out ]; then mkdir -p $out/counters && cp $cnt/*.json $out/counters/ 2>/dev/null; fi
}
for n in $(seq 1 $1); do
  now=$(date -u +%H%M)
  if [ "$now" -gt 0958 ]; then echo "$(date -u +%H:%M:%S) stop before pair $n (after 09:58)" >> $LOG; break; fi
  if [ $((n % 2)) -eq 1 ]; then run_one before $n; run_one after $n; else run_one after $n; run_one before $n; fi
done
echo "$(date -u +%H:%M:%S) done" >> $LOG
