"""Per-run switch state of the trace experiment: lossy links and flow-hash seeds.

* **Lossy links** (scenarios ``lossy-0.1`` and ``lossy-1``): this kernel has no netem, so the
  switches lose packets themselves: ``DlcpEgress.link_loss`` (p4src/dlcp.p4) on the egress
  port of both ends of the named switch-to-switch link, with the scenario's probability;
  the packets lost are counted per port in ``DlcpEgress.link_loss_drops`` and recorded.
* **Flow-hash seeds** (every run): each switch's ``DlcpIngress.hash_seed`` gets a nonzero
  32-bit seed drawn from the run's pair (scenario, seed), so the ECMP members of flows whose
  5-tuple never changes (DLCP's fixed UDP ports) vary from round to round while the two
  configurations of a pair meet the same collisions. The seeds are recorded in the run.

Each call opens its own P4Runtime sessions (the policy apply between runs takes the
switches over with a newer election id) and makes the two tables hold exactly this run's
entries, so a run never inherits the previous scenario's loss.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError

LINK_LOSS = "DlcpEgress.link_loss"
LOSE_ON_LINK = "DlcpEgress.lose_on_link"
LINK_LOSS_DROPS = "DlcpEgress.link_loss_drops"
HASH_SEED = "DlcpIngress.hash_seed"
SET_HASH_SEED = "DlcpIngress.set_hash_seed"
EGRESS_PORT = "standard_metadata.egress_port"


def loss_threshold(probability: float) -> int:
    """``lose_on_link``'s parameter: probability x (2^32 - 1) (p4src/README.md)."""
    if not 0.0 <= probability <= 1.0:
        raise ExperimentError(f"a link's loss probability must be within [0, 1], not {probability}")
    return round(probability * 0xFFFFFFFF)


def lossy_ports(links: Sequence[Any], named: Sequence[tuple[str, str]]) -> dict[str, list[int]]:
    """Switch -> egress ports that lose: both ends of each named link (``links``: the fabric
    description's, with ``a``, ``a_port``, ``b``, ``b_port``)."""
    out: dict[str, list[int]] = {}
    for x, y in named:
        found = [link for link in links if {link.a, link.b} == {x, y}]
        if not found:
            raise ExperimentError(f"the fabric has no link {x}-{y} to make lossy")
        for link in found:
            out.setdefault(link.a, []).append(int(link.a_port))
            out.setdefault(link.b, []).append(int(link.b_port))
    return {k: sorted(v) for k, v in out.items()}


def draw_hash_seeds(switches: Sequence[str], scenario: str, seed: int) -> dict[str, int]:
    """A nonzero 32-bit flow-hash seed per switch, the same for every configuration of a pair."""
    rng = random.Random(f"hash-seeds/{scenario}/{seed}")
    return {name: rng.randrange(1, 1 << 32) for name in sorted(switches)}


@contextmanager
def _controller(description: Path, timeout_s: float, load_pipeline: bool) -> Iterator[Any]:
    from controller.fabric_controller import FabricController
    from controller.pipeline import Pipeline
    from gradfabric import fabric as fabric_file

    fabric = fabric_file.load(description)
    pipeline = Pipeline.load(fabric.path(fabric.program.p4info), fabric.path(fabric.program.device_config))
    controller = FabricController.for_fabric(fabric, pipeline, connect_timeout=timeout_s)
    try:
        for session in controller.sessions.values():
            session.load_pipeline = load_pipeline
        yield controller
    finally:
        controller.close()


def set_run_state(description: Path, seeds: Mapping[str, int], lossy: Mapping[str, Sequence[int]],
                  probability: float, timeout_s: float = 20.0) -> None:
    """Every switch: its hash seed (0 when not in ``seeds``) and exactly the lossy ports given."""
    from controller.entities import TableEntry
    from controller.errors import ControllerError

    threshold = loss_threshold(probability)
    try:
        with _controller(description, timeout_s, load_pipeline=True) as controller:
            for name, session in controller.sessions.items():
                schema = session.schema
                desired = [TableEntry.build(schema, HASH_SEED, action=SET_HASH_SEED,
                                            params={"seed": int(seeds.get(name, 0))}, is_default=True)]
                desired += [TableEntry.build(schema, LINK_LOSS, {EGRESS_PORT: port}, LOSE_ON_LINK,
                                             {"threshold": threshold}) for port in lossy.get(name, ())]
                session.sync(desired, frozenset({HASH_SEED, LINK_LOSS}))
    except ControllerError as exc:
        raise ExperimentError(f"setting the run's hash seeds and lossy links failed: {exc}") from exc


def link_drops(description: Path, ports: Mapping[str, Sequence[int]],
               timeout_s: float = 10.0) -> dict[str, dict[int, int]]:
    """Packets lost so far by each given port's link (``link_loss_drops``), per switch."""
    from controller.errors import ControllerError

    out: dict[str, dict[int, int]] = {}
    if not ports:
        return out
    try:
        with _controller(description, timeout_s, load_pipeline=False) as controller:
            for name, cells in ports.items():
                found = controller[name].read_counter(LINK_LOSS_DROPS, list(cells))
                out[name] = {int(c.index): int(c.packets) for c in found if c.index is not None}
    except ControllerError as exc:
        raise ExperimentError(f"reading the lossy links' drop counters failed: {exc}") from exc
    return out


def drops_between(before: Mapping[str, Mapping[int, int]], after: Mapping[str, Mapping[int, int]]) -> dict[str, int]:
    """``switch:port`` -> packets the link lost during the run."""
    return {f"{name}:{port}": n - before.get(name, {}).get(port, 0)
            for name, cells in sorted(after.items()) for port, n in sorted(cells.items())}
