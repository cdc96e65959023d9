"""Run p4c's BMv2 STF driver (``run-bmv2-test.py``) with longer settle times.

Executed by the STF python (the one with ``ply`` and ``scapy``), never imported by the
project: ``python stf_bmv2_shim.py SCALE QUEUE_DEPTH DRIVER ARGS...``. p4c's driver sleeps 1 s between
its last CLI command and the next packet, and 2 s between the last packet and stopping the
switch. On a loaded machine simple_switch_CLI may not have installed the entries within 1 s,
and BMv2 may not have drained thousands of packets within 2 s, so packets meet empty tables
or are cut off. The shim multiplies every sleep of the driver's module by SCALE; the driver's
parsing, compilation, CLI commands and packet comparison are p4c's own, unchanged.

The driver writes packets into simple_switch's input fifos as fast as it can. BMv2's input
buffer applies back pressure, but its egress queues (64 packets by default) drop when full, so
on a loaded machine a port that receives hundreds of packets loses some, depending on thread
timing. When QUEUE_DEPTH is not 0, the shim sends ``set_queue_depth QUEUE_DEPTH`` (every port
and priority) to simple_switch_CLI before the STF file's first command.
"""

from __future__ import annotations

import runpy
import sys
import time
import types


def main() -> None:
    scale = float(sys.argv[1])
    queue_depth = int(sys.argv[2])
    driver = sys.argv[3]
    sys.argv = [driver, *sys.argv[4:]]
    sys.path.insert(0, str(__import__("pathlib").Path(driver).resolve().parent))
    import bmv2stf  # noqa: E402  (p4c's module, beside the driver)

    slow = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
    slow.sleep = lambda seconds: time.sleep(seconds * scale)
    bmv2stf.time = slow
    if queue_depth:
        run_command = bmv2stf.RunBMV2.execute_stf_command

        def deep_queues_first(self, stf_entry):  # type: ignore[no-untyped-def]
            if not getattr(self, "_queues_set", False):
                self._queues_set = True
                self.do_cli_command(f"set_queue_depth {queue_depth}")
            return run_command(self, stf_entry)

        bmv2stf.RunBMV2.execute_stf_command = deep_queues_first
    runpy.run_path(driver, run_name="__main__")


if __name__ == "__main__":
    main()
