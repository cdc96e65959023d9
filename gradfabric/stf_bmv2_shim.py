"""Run p4c's BMv2 STF driver (``run-bmv2-test.py``) with longer settle times.

Executed by the STF python (the one with ``ply`` and ``scapy``), never imported by the
project: ``python stf_bmv2_shim.py SCALE DRIVER ARGS...``. p4c's driver sleeps 1 s between
its last CLI command and the next packet, and 2 s between the last packet and stopping the
switch. On a loaded machine simple_switch_CLI may not have installed the entries within 1 s,
and BMv2 may not have drained thousands of packets within 2 s, so packets meet empty tables
or are cut off. The shim multiplies every sleep of the driver's module by SCALE; the driver's
parsing, compilation, CLI commands and packet comparison are p4c's own, unchanged.
"""

from __future__ import annotations

import runpy
import sys
import time
import types


def main() -> None:
    scale = float(sys.argv[1])
    driver = sys.argv[2]
    sys.argv = [driver, *sys.argv[3:]]
    sys.path.insert(0, str(__import__("pathlib").Path(driver).resolve().parent))
    import bmv2stf  # noqa: E402  (p4c's module, beside the driver)

    slow = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
    slow.sleep = lambda seconds: time.sleep(seconds * scale)
    bmv2stf.time = slow
    runpy.run_path(driver, run_name="__main__")


if __name__ == "__main__":
    main()
