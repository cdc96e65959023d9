#!/bin/bash
# Alternated runs: 15bfde9 (/tmp/h2base) against the code after (/tmp/h2/cur), same benchmark files in both.
cd /tmp/h2/final
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) -eq 1 ]; then order="base after"; else order="after base"; fi
  for v in $order; do
    d=/tmp/h2/cur; [ $v = base ] && d=/tmp/h2base
    echo "== transport $v pair $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> transport.txt
    (cd $d && /work/main/.venv/bin/python -m tests.benchmarks.bench_transport --rounds 1 >> /tmp/h2/final/transport.txt 2>&1)
  done
  for v in $order; do
    d=/tmp/h2/cur; [ $v = base ] && d=/tmp/h2base
    echo "== hook $v pair $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> hook.txt
    (cd $d && /work/main/.venv/bin/python -m tests.benchmarks.bench_ddp_hook --runs 1 --collectives ring --save /tmp/h2/final/hook_${v}_$i >> /tmp/h2/final/hook.txt 2>&1)
  done
  echo "== pair $i done $(date -u +%T)" >> transport.txt
done
