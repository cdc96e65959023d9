"""Per pair of c-answers-before-N / c-answers-after-N sweeps: p50 (from each sweep's results.json),
DLCP's p50 over DDP-style TCP's, after over before, the probes answered in C (counters/), CPU per
packet sent; medians, a bootstrap CI of the median and a sign count. Run: python summarize.py"""
import glob, json, math, random, re, statistics
from pathlib import Path

RES = Path(__file__).resolve().parent.parent
DLCP = ("dlcp", "dlcp-merged")


def sweep(tree: str, n: int) -> dict:
    d = RES / f"c-answers-{tree}-{n}"
    s = json.loads((d / "results.json").read_text())["summary"]["lossy-0.1"]
    plan = json.loads((d / "plan.json").read_text())
    cnt = []
    for f in glob.glob(str(d / "counters" / "*.json")):  # some files end early (the dump's first version); the counters come first
        t = open(f).read()
        m = re.search(r'"answered_in_c": (\d+)', t)
        cnt.append((int(re.search(r'"probes": (\d+)', t).group(1)), int(m.group(1)) if m else 0))
    cpu = {}
    for f in sorted(glob.glob(str(d / "runs" / "*.json"))):
        x = json.loads(open(f).read())
        if x["config"] in DLCP:
            cpu[x["config"]] = [v["cpu_share"] * x["seconds"] / v["totals"]["packets"] * 1e6 for v in x["jobs"]["1"]["ranks"].values()]
    return {"p": {c: s[c]["p50_s"] * 1e3 for c in s}, "load": plan["load_at_start"][0], "cnt": cnt, "cpu": cpu,
            "zero": {c: s[c]["loss_share"] for c in DLCP}, "commit": (plan.get("code") or {}).get("commit")}


pairs = sorted(int(p.name.rsplit("-", 1)[1]) for p in RES.glob("c-answers-after-*"))
rows = []
print("| pair | order | load B / A | DDP-style TCP p50 B / A (ms) | full DLCP p50 B / A | dlcp-merged p50 B / A | "
      "DLCP/TCP B / A | after/before | merged/TCP B / A | after/before | probes answered in C (after) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n in pairs:
    b, a = sweep("before", n), sweep("after", n)
    rb = {c: b["p"][c] / b["p"]["ddp-tcp"] for c in DLCP}
    ra = {c: a["p"][c] / a["p"]["ddp-tcp"] for c in DLCP}
    share = sum(x[1] for x in a["cnt"]) / sum(x[0] for x in a["cnt"])
    rows.append({"b": b, "a": a, "r": {c: ra[c] / rb[c] for c in DLCP}})
    print(f"| {n} | {'B,A' if n % 2 else 'A,B'} | {b['load']:.1f} / {a['load']:.1f} | {b['p']['ddp-tcp']:,.0f} / {a['p']['ddp-tcp']:,.0f} | "
          f"{b['p']['dlcp']:,.0f} / {a['p']['dlcp']:,.0f} | {b['p']['dlcp-merged']:,.0f} / {a['p']['dlcp-merged']:,.0f} | "
          f"{rb['dlcp']:.2f} / {ra['dlcp']:.2f} | {ra['dlcp'] / rb['dlcp']:.2f} | {rb['dlcp-merged']:.2f} / {ra['dlcp-merged']:.2f} | "
          f"{ra['dlcp-merged'] / rb['dlcp-merged']:.2f} | {100 * share:.0f} % |")
print()
print("commits:", sorted({r[k]["commit"] for r in rows for k in "ba"}))
rng = random.Random(1)
for c in DLCP:
    v = [r["r"][c] for r in rows]
    meds = sorted(statistics.median(rng.choices(v, k=len(v))) for _ in range(10000))
    below = sum(x < 1 for x in v)
    p = 2 * sum(math.comb(len(v), k) for k in range(below, len(v) + 1)) / 2 ** len(v)
    print(f"{c}/TCP, after over before: median {statistics.median(v):.3f} (bootstrap 95% CI {meds[250]:.3f}-{meds[9749]:.3f}), "
          f"range {min(v):.3f}-{max(v):.3f}, below 1 in {below} of {len(v)} pairs (two-sided sign test p = {min(1, p):.4f})")
for c in ("ddp-tcp",) + DLCP:
    v = [r["a"]["p"][c] / r["b"]["p"][c] for r in rows]
    print(f"{c} p50 after over before: median {statistics.median(v):.3f}, range {min(v):.3f}-{max(v):.3f}, below 1 in {sum(x < 1 for x in v)}")
for k, name in (("b", "before"), ("a", "after")):
    for c in DLCP:
        u = [x for r in rows for x in r[k]["cpu"][c]]
        z = [r[k]["zero"][c] for r in rows]
        print(f"{name} {c}: CPU per packet sent {statistics.median(u):.0f} µs ({min(u):.0f}-{max(u):.0f}), "
              f"zero-filled {100 * statistics.median(z):.2f} % ({100 * min(z):.2f}-{100 * max(z):.2f})")
    loads = [r[k]["load"] for r in rows]
    print(f"{name}: 1-minute load at start {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})")
