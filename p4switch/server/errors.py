"""P4Runtime errors: a gRPC status code and a message, raised while serving a request."""

from __future__ import annotations

import grpc

from p4switch import tables


class RpcError(Exception):
    """Ends one RPC (or one update of a Write) with ``code`` and ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def canonical_code(self) -> int:
        """The google.rpc.Code number of :attr:`code`."""
        return int(self.code.value[0])


def invalid(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.NOT_FOUND, message)


def unimplemented(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.UNIMPLEMENTED, message)


def out_of_range(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.OUT_OF_RANGE, message)


_TABLE_CODES: tuple[tuple[type[tables.TableError], grpc.StatusCode], ...] = (
    (tables.EntryExists, grpc.StatusCode.ALREADY_EXISTS),
    (tables.EntryNotFound, grpc.StatusCode.NOT_FOUND),
    (tables.InvalidEntry, grpc.StatusCode.INVALID_ARGUMENT),
    (tables.TableFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (tables.ConstTable, grpc.StatusCode.PERMISSION_DENIED),
)


def from_table_error(exc: tables.TableError) -> RpcError:
    """The P4Runtime status for a refused table operation."""
    for kind, code in _TABLE_CODES:
        if isinstance(exc, kind):
            return RpcError(code, str(exc))
    return RpcError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
