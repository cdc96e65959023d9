"""Applying a 10,000-entry DLCP policy to one switch: the controller (read, diff, batched
writes) against inserting the same entries one request at a time through p4runtime-shell.

The switch is an embedded-target process (``p4switch run --no-p4``) running the DLCP
program with its table sizes raised to hold the entries, when the embedded compiler is
available; otherwise the in-process fake P4Runtime server of the tests (the figure name
says which). Each arm gets a fresh switch; both write the same entries.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.entities import TableEntry
from controller.fabric_controller import FabricController
from controller.pipeline import Pipeline
from controller.policy import POLICY_TABLES, parse_policy, policy_entries
from controller.switch import SwitchSession
from gradfabric.paths import ROOT
from tests import netns
from tests.benchmarks.figure import Figure
from tests.fake_p4runtime import FakeSwitch

JOBS = 1000
LAYERS_PER_JOB = 10  # 10,000 layer_priority entries
DEVICE_ID = 1


def big_policy() -> dict:
    return {
        "jobs": [
            {
                "id": j,
                "layers": [{"tensors": f"{10 * i}..{10 * i + 9}", "priority": 7 - i % 8} for i in range(LAYERS_PER_JOB)],
            }
            for j in range(JOBS)
        ]
    }


def _embedded_pipeline(workdir: Path) -> Pipeline | None:
    """The DLCP program with every table size raised to 16384, compiled for the embedded target."""
    try:
        from gradfabric.p4build import compile_embedded
    except ImportError:
        return None
    source = workdir / "dlcp_bench.p4"
    text = (ROOT / "p4src" / "dlcp.p4").read_text()
    source.write_text(re.sub(r"size\s*=\s*\d+\s*;", "size = 16384;", text))
    try:
        out = compile_embedded(source, workdir)
    except Exception:  # the embedded front end is not complete: use the fake server
        return None
    return Pipeline.load(out.p4info, out.device_config)


@contextmanager
def embedded_switch(workdir: Path, tag: str) -> Iterator[str]:
    address = f"127.0.0.1:{netns.free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "p4switch.cli", "run", "--no-p4", "--device-id", str(DEVICE_ID),
         "--grpc-server-addr", address, "--log-file", str(workdir / f"{tag}.log"), "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(address.split(":"), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"p4switch run did not start (see {workdir / f'{tag}.log'})") from None
                time.sleep(0.1)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def fake_switch(workdir: Path, tag: str) -> Iterator[str]:
    with FakeSwitch(DEVICE_ID) as fake:
        yield fake.address


def controller_apply(address: str, pipeline: Pipeline, entries: list[TableEntry]) -> float:
    session = SwitchSession("s1", address, DEVICE_ID, pipeline)
    session.connect()  # loads the pipeline: not timed
    with FabricController([session]) as controller:
        start = time.perf_counter()
        result = controller.apply({"s1": entries}, POLICY_TABLES)
        elapsed = time.perf_counter() - start
    assert result.total == len(entries), result.total
    return elapsed


def shell_inserts(address: str, pipeline: Pipeline, entries: list[TableEntry]) -> float:
    import p4runtime_sh.shell as sh

    loader = SwitchSession("loader", address, DEVICE_ID, pipeline)
    loader.connect()
    loader.close()
    sh.setup(device_id=DEVICE_ID, grpc_addr=address, election_id=(1 << 62, 1), verbose=False)
    try:
        schema = pipeline.schema
        start = time.perf_counter()
        for entry in entries:
            te = sh.TableEntry(entry.table)(action=entry.action)
            for name, m in entry.match:
                te.match[name] = m.text(schema.tables[entry.table].field(name).bitwidth)
            for name, value in entry.params:
                te.action[name] = str(value)
            te.priority = entry.priority
            te.insert()
        return time.perf_counter() - start
    finally:
        sh.teardown()


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as tmp:
        workdir = Path(tmp)
        pipeline = _embedded_pipeline(workdir)
        where = "p4switch"
        switch = embedded_switch
        if pipeline is None:
            from tests.controller_helpers import pipeline as built_pipeline
            pipeline = built_pipeline()
            where, switch = "fake P4Runtime server", fake_switch
        entries = policy_entries(parse_policy(big_policy()), pipeline.schema)
        with switch(workdir, "controller") as address:
            batched = controller_apply(address, pipeline, entries)
        with switch(workdir, "shell") as address:
            one_by_one = shell_inserts(address, pipeline, entries)
    n = len(entries)
    return [
        Figure(
            name=f"policy apply, {n:,} entries, one switch ({where}): entries/s",
            value=n / batched,
            baseline_name="p4runtime-shell, one insert per request",
            baseline=n / one_by_one,
            unit="entries/s",
        )
    ]


if __name__ == "__main__":
    for figure in run():
        print(f"{figure.name}: {figure.value:,.0f} vs {figure.baseline:,.0f} {figure.unit} ({figure.ratio:.2f}x)")
