#!/bin/bash
for i in 1 2 3 4 5 6; do for v in cur viw; do
  cd /tmp/h2/$v; echo "== $v pair $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  /work/main/.venv/bin/python -m tests.benchmarks.bench_transport --rounds 1 2>&1 | grep "bench transport: round"
done; done
