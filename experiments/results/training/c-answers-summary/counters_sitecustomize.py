"""Record each DLCP endpoint's receive counters when it closes (measurement only, outside the repo).

Active when GFE_COUNTERS names a folder: after hosts.endpoint is imported, Endpoint.close is
wrapped to write the endpoint's reassembler stats (answered_in_c where the code has it) to
<folder>/<pid>-<id>.json before closing."""
import importlib.abc
import importlib.machinery
import os
import sys

_DIR = os.environ.get("GFE_COUNTERS")


def _patch(module):
    import dataclasses
    import json
    import time

    cls = module.Endpoint
    orig = cls.close

    def close(self, *a, **kw):
        try:
            st = self.reassembler.stats
            rec = dataclasses.asdict(st) if dataclasses.is_dataclass(st) else dict(vars(st))
            rec = {k: ({str(kk): vv for kk, vv in v.items()} if isinstance(v, dict) else v) for k, v in rec.items()}
            rec.update(pid=os.getpid(), argv=sys.argv, module=module.__file__, time=time.time(),
                       address=list(getattr(self, "address", ()) or ()))
            with open(os.path.join(_DIR, f"{os.getpid()}-{id(self):x}.json"), "w") as f:
                json.dump(rec, f, default=str)
        except Exception as exc:  # never disturb the run
            print(f"gfE counters: {exc!r}", file=sys.stderr)
        return orig(self, *a, **kw)

    cls.close = close


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "hosts.endpoint":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_orig = loader.exec_module

        def exec_module(module):
            exec_orig(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


if _DIR:
    sys.meta_path.insert(0, _Finder())
