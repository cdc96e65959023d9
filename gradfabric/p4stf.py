"""Run one STF test on BMv2 with p4c's own STF driver (``run-bmv2-test.py``).

The driver is the one shipped beside the reference tools (``<prefix>/p4c-stf/``, found from the
``p4c-stf`` executable, see :mod:`gradfabric.p4ref`). It compiles the program with
``p4c-bm2-ss``, starts ``simple_switch --use-files`` (ports are pcap files, no interfaces are
made), installs the entries with ``simple_switch_CLI`` and compares the output pcaps with the
``expect`` lines. Two things are arranged here rather than in the tool folder:

- a build folder with ``config.h`` and a link to ``p4c-bm2-ss`` (the driver looks there), and
  ``P4C_16_INCLUDE_PATH`` pointing at ``share/p4c/p4include``;
- the driver's fixed sleeps are scaled (``stf_bmv2_shim.py``): 1 s between CLI commands and
  the next packet is not always enough on a loaded machine.

The driver needs a python with ``ply`` and ``scapy==2.5.0`` (p4c 1.2.4.17's pin): taken from
``$P4C_STF_PYTHON``, else ``.venv-stf/bin/python`` in the project (``make install`` makes it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradfabric.errors import GradfabricError
from gradfabric.p4ref import require_tool
from gradfabric.paths import ROOT

STF_PYTHON_ENV = "P4C_STF_PYTHON"
STF_VENV = ROOT / ".venv-stf"
SHIM = Path(__file__).with_name("stf_bmv2_shim.py")
DEFAULT_TIMEOUT_S = 600


class P4StfError(GradfabricError):
    """p4c's STF driver could not be found or run (not: a test that failed)."""


@dataclass(frozen=True)
class StfRun:
    """One run of p4c's driver: exit code 0 when every expectation held."""

    returncode: int
    output: str
    work_dir: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def out_pcaps(self) -> dict[int, Path]:
        """The output pcap of each port BMv2 wrote (``pcapN_out.pcap``)."""
        found: dict[int, Path] = {}
        for path in self.work_dir.rglob("pcap*_out.pcap"):
            found[int(path.name[4:].split("_", 1)[0])] = path
        return found


def stf_python() -> str:
    """The python that runs p4c's driver ($P4C_STF_PYTHON, else the project's .venv-stf)."""
    named = os.environ.get(STF_PYTHON_ENV, "").strip()
    if named:
        return named
    candidate = STF_VENV / "bin" / "python"
    if candidate.is_file():
        return str(candidate)
    raise P4StfError(f"no python for p4c's STF driver: set ${STF_PYTHON_ENV} to a python with "
                     f"ply and scapy==2.5.0, or run `make install` (creates {STF_VENV})")


def driver_dir() -> Path:
    """``<prefix>/p4c-stf``: p4c's STF sources beside the reference tools."""
    tool = require_tool("p4c-stf").resolve()
    root = tool.parent.parent / "p4c-stf"
    if not (root / "backends" / "bmv2" / "run-bmv2-test.py").is_file():
        raise P4StfError(f"p4c's STF driver is not at {root}/backends/bmv2/run-bmv2-test.py")
    return root


def _build_dir(work: Path, stf_root: Path) -> Path:
    build = work / "p4c-build"
    build.mkdir(exist_ok=True)
    (build / "config.h").write_text("#define HAVE_SIMPLE_SWITCH 1\n")
    link = build / "p4c-bm2-ss"
    if not link.exists():
        link.symlink_to(require_tool("p4c-bm2-ss"))
    return build


def run_p4c_stf(program: Path, stf: Path, *, settle_scale: float = 3.0,
                switch_args: tuple[str, ...] = (), keep: bool = False, queue_depth: int = 0,
                timeout_s: float = DEFAULT_TIMEOUT_S, target_args: tuple[str, ...] = ()) -> StfRun:
    """Run `stf` against `program` on BMv2; the work folder is removed unless `keep` or failed.

    `queue_depth` (packets, 0 = BMv2's default of 64) deepens every egress queue before the
    first command, so a burst of generated packets is not cut by queue drops that depend on
    the machine's load.
    """
    stf_root = driver_dir()
    bin_dir = require_tool("simple_switch").parent
    include = bin_dir.parent / "share" / "p4c" / "p4include"
    work = Path(tempfile.mkdtemp(prefix="p4c-stf."))
    build = _build_dir(work, stf_root)
    command = [stf_python(), str(SHIM), str(settle_scale), str(queue_depth),
               str(stf_root / "backends" / "bmv2" / "run-bmv2-test.py"), str(stf_root),
               str(Path(program).resolve()), "-tf", str(Path(stf).resolve()),
               "-bd", str(build), "-td", str(work), "-b"]
    for arg in switch_args:
        command.append(f"--switch-arg={arg}")
    for arg in target_args:  # simple_switch's own options (after its `--`), e.g. --priority-queues
        command.append(f"--target-specific-switch-arg={arg}")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    if include.is_dir():
        env["P4C_16_INCLUDE_PATH"] = str(include)
    try:
        proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise P4StfError(f"could not run p4c's STF driver on {stf} (work dir {work}): {exc}") from exc
    output = proc.stdout + proc.stderr
    if proc.returncode == 0 and not any(work.rglob("switch.log.txt")):
        raise P4StfError(f"p4c's driver exited 0 on {stf} but simple_switch never ran:\n"
                         + "\n".join(output.splitlines()[-20:]))
    run = StfRun(proc.returncode, output, work)
    if run.ok and not keep:
        shutil.rmtree(work, ignore_errors=True)
    return run
