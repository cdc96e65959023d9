"""Optional per-job shared key: every datagram carries a truncated HMAC-SHA256 tag.

For jobs on shared networks where an attacker can send from a member's address. With a
key, an endpoint appends ``TAG_LEN`` bytes (HMAC-SHA256 of the datagram under the key) to
everything it sends and drops (``bad_tag``) whatever arrives without a valid tag, before it
is looked at in any other way (liveness included). Data packets then hold ``TAG_LEN / 4``
fewer values so that they still fit the MTU. The DLCP header is unchanged and switches
ignore the trailer.
"""

from __future__ import annotations

import hmac

#: Bytes of the tag appended to every datagram (128 bits of HMAC-SHA256).
TAG_LEN = 16


class Signer:
    """Signs and checks datagrams with one job key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError(f"a job key needs at least 16 bytes, got {len(key)}")
        self._key = bytes(key)

    def sign(self, data: bytes | memoryview) -> bytes:
        """`data` followed by its tag."""
        return bytes(data) + hmac.digest(self._key, data, "sha256")[:TAG_LEN]

    def verify(self, data: memoryview) -> memoryview | None:
        """The datagram without its tag, or None when the tag is missing or wrong."""
        if len(data) < TAG_LEN:
            return None
        body, tag = data[:-TAG_LEN], data[-TAG_LEN:]
        if not hmac.compare_digest(hmac.digest(self._key, body, "sha256")[:TAG_LEN], tag):
            return None
        return body
