"""The boot banner: what is running and where its logs, pcaps and request logs are."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def boot_banner(description: Mapping[str, Any], workdir: Path, *, pcap: bool,
                description_path: Path, policy: Path | None,
                warnings: Sequence[str] = (), interactive: bool = True) -> str:
    """A few lines for the user: switches, hosts, files, and (with a CLI) its extra commands."""

    def rel(path: str | Path) -> str:
        p = Path(path)
        if p.is_absolute():
            try:
                return str(p.relative_to(workdir))
            except ValueError:
                return str(p)
        return str(p)

    sw = description["switches"]
    hosts = description["hosts"]
    first = sw[0]["name"]
    lines = [
        f"gradfabric: {description['name']} fabric is up on the {description['target']} target "
        f"({len(sw)} switches, {len(hosts)} hosts)",
        "  switches (name, device id, P4Runtime address, port:peer):",
    ]
    for s in sw:
        ports = " ".join(f"{p['port']}:{p['peer']}" for p in s["ports"])
        lines.append(f"    {s['name']:<8} {s['device_id']:>3}  {s['grpc_addr']:<16} {ports}")
    lines.append("  hosts (name, address, switch port):")
    for h in hosts:
        lines.append(f"    {h['name']:<8} {h['ip']}/{h['prefix_len']:<3} {h['switch']} port {h['switch_port']}")
    log = Path(sw[0]["log"])
    lines += [
        f"  fabric description:  {rel(description_path)}",
        f"  switch logs:         {rel(log.parent)}/<switch>{log.suffix} "
        f"(process output in <switch>.out), e.g. {rel(log)}",
        f"  P4Runtime requests:  {rel(Path(sw[0]['request_log']).parent)}/<switch>-p4runtime.log "
        f"as the switch saw them, e.g. {rel(sw[0]['request_log'])}" if description["target"] != "bmv2"
        else "  P4Runtime requests:  BMv2 writes no request log (its log shows table operations at --log-level debug)",
        f"  controller requests: {rel(Path(sw[0]['request_log']).parent)}/<switch>-controller.log "
        f"as the controller sent them, e.g. {rel(Path(sw[0]['request_log']).with_name(first + '-controller.log'))}",
        f"  pcaps:               {rel(workdir / 'pcaps')}/ (each switch port's packets in and out)" if pcap
        else "  pcaps:               off (`make run PCAP=1`, or --pcap, captures every switch port)",
        f"  policy:              {rel(policy)}" if policy else "  policy:              none pushed",
    ]
    lines += [f"  warning: {w}" for w in warnings]
    if not interactive:
        lines.append("  no CLI: the fabric runs its scenario, then everything is removed "
                     "(`make stop` also cleans up after a crash)")
        return "\n".join(lines)
    lines += [
        "  extra CLI commands:  counters [SWITCH]   policy apply FILE   policy show",
        f"  try: pingall   h1 ping -c 3 {hosts[-1]['ip']}   counters {first}",
        "  leave with: exit (then everything is removed; `make stop` also cleans up after a crash)",
    ]
    return "\n".join(lines)
