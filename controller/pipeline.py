"""The forwarding pipeline a switch runs: P4Info plus device config, with a content cookie."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from p4.v1 import p4runtime_pb2

from controller.errors import ControllerError
from controller.schema import P4Schema


@dataclass(frozen=True)
class Pipeline:
    schema: P4Schema
    device_config: bytes

    @classmethod
    def load(cls, p4info: str | Path, device_config: str | Path) -> Pipeline:
        try:
            config = Path(device_config).read_bytes()
        except OSError as exc:
            raise ControllerError(f"cannot read device config {device_config}: {exc.strerror}") from exc
        return cls(P4Schema.load(p4info), config)

    @property
    def cookie(self) -> int:
        """A 63-bit digest of P4Info and device config: equal cookies mean the same pipeline."""
        digest = hashlib.sha256(self.schema.p4info.SerializeToString(deterministic=True) + self.device_config).digest()
        return int.from_bytes(digest[:8], "big") >> 1

    def config(self) -> p4runtime_pb2.ForwardingPipelineConfig:
        config = p4runtime_pb2.ForwardingPipelineConfig(p4_device_config=self.device_config)
        config.p4info.CopyFrom(self.schema.p4info)
        config.cookie.cookie = self.cookie
        return config

    def matches(self, loaded: p4runtime_pb2.ForwardingPipelineConfig | None) -> bool:
        """Whether a switch's loaded pipeline is this one (by cookie, else by P4Info)."""
        if loaded is None:
            return False
        if loaded.cookie.cookie:
            return loaded.cookie.cookie == self.cookie
        return bool(loaded.p4info.tables) and loaded.p4info.SerializeToString(
            deterministic=True
        ) == self.schema.p4info.SerializeToString(deterministic=True)
