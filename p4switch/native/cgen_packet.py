"""C for packet_in and packet_out: extract (fixed headers, with fields wider than 64 bits as
words of their own), advance, lookahead without a value, and emit."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import PacketParam
from p4switch.frontend.types import BitT, HeaderT, StackT, StructT, field_offset, slot_count
from p4switch.native.cgen_expr import wide_parts
from p4switch.native.cgen_stacks import StackGen


class PacketGen(StackGen):
    """Mixin of the generator: packet methods."""

    def header_layout(self, t: HeaderT, node: Any, wide: bool = False) -> tuple[int, list[tuple[int, int, Any]]]:
        """(bytes, [(slot offset, bit offset, width)]) of a fixed header; with `wide`, a field
        wider than 64 bits has the width ("wide", N)."""
        if t.varbit is not None:
            raise self.fail(node, "varbit headers")
        off, fields = self.fixed_fields(t.fields, node, wide)
        return off // 8, fields

    def packet_method(self, node: Tree, param: PacketParam, method: str, args: list,
                      out: list[str], ind: str) -> None:
        if param.kind == "packet_out" and method == "emit":
            self.emit(node, self.e(args[0]).type, self.e(args[0]).place, out, ind)
            return
        if param.kind == "packet_in" and method == "extract" and len(args) == 2 \
                and isinstance(self.e(args[0]).type, HeaderT):
            self.extract_varbit(node, args[0], self.e(args[0]), args[1], out, ind)
            return
        if param.kind == "packet_in" and method == "extract" and len(args) == 1:
            target = self.e(args[0])
            if isinstance(target.type, HeaderT) and isinstance(target.extra, tuple) and target.extra \
                    and target.extra[0] == "union_member":
                self.extract_union_member(node, args[0], self.header_layout(target.type, node, wide=True), out, ind)
                return
            if isinstance(target.type, HeaderT) and isinstance(target.extra, tuple) and target.extra \
                    and target.extra[0] == "stack_next":
                self.extract_next(node, args[0], target, self.header_layout(target.type, node), out, ind)
                return
            if not isinstance(target.type, HeaderT) or target.place is None or target.place.base is None:
                raise self.fail(node, "extract into a stack or dynamic place")
            if isinstance(target.extra, tuple) and target.extra:
                raise self.fail(node, "extract into a union member or stack")
            nbytes, fields = self.header_layout(target.type, node, wide=True)
            b = target.place.base
            out.append(f"{ind}if (c->pos + {nbytes} > c->len) {{ err_ = {self.error_index('PacketTooShort')}; goto p_error; }}")
            out.append(f"{ind}{{ const uint8_t *d_ = c->data + c->pos;")
            for so, bo, w in fields:
                if isinstance(w, tuple):  # bit<N>, N > 64: its words, least significant first
                    for i, (wbo, ww) in enumerate(wide_parts(bo, w[1])):
                        out.append(f"{ind}  S[GF_WSLOT({b + so}) + {i}] = gf_get(d_, {wbo}, {ww});")
                    continue
                out.append(f"{ind}  S[{b + so}] = gf_get(d_, {bo}, {w});")
            out.append(f"{ind}}} c->pos += {nbytes}; S[{b}] = 1;")
            return
        if param.kind == "packet_in" and method == "advance":
            out.append(f"{ind}{{ uint64_t n_ = {self.cx(args[0])};")
            out.append(f"{ind}  if (n_ % 8) {{ err_ = {self.error_index('ParserInvalidArgument')}; goto p_error; }}")
            out.append(f"{ind}  if (c->pos + n_ / 8 > c->len) {{ err_ = {self.error_index('PacketTooShort')}; goto p_error; }}")
            out.append(f"{ind}  c->pos += (uint32_t)(n_ / 8); }}")
            return
        if param.kind == "packet_in" and method == "lookahead" and not args and self.in_parser:
            # a lookahead whose value is not used: PacketTooShort when its bits are not there
            t = self.e(node).type
            if isinstance(t, BitT):
                nbytes = (t.width + 7) // 8
            elif isinstance(t, HeaderT | StructT) and hasattr(self, "_lookahead_layout"):
                nbytes = self._lookahead_layout(t, node)[0]
            else:
                raise self.fail(node, f"lookahead of {t}")
            out.append(f"{ind}if (c->pos + {nbytes} > c->len) {{ err_ = {self.error_index('PacketTooShort')}; "
                       f"goto p_error; }}")
            return
        raise self.fail(node, f"packet method {method}")

    def emit(self, node: Any, t: Any, place: Any, out: list[str], ind: str) -> None:
        if place is None or place.base is None:
            raise self.fail(node, "emit of a dynamic place")
        if isinstance(t, HeaderT) and t.varbit is not None:
            self.emit_varbit(node, t, place.base, out, ind)
            return
        if isinstance(t, HeaderT):
            nbytes, fields = self.header_layout(t, node, wide=True)
            b = place.base
            out.append(f"{ind}if (S[{b}] && c->out_len + {nbytes} <= GF_MAXFRAME) {{ uint8_t *o_ = c->out + c->out_len;"
                       f" memset(o_, 0, {nbytes});")
            for so, bo, w in fields:
                if isinstance(w, tuple):
                    for i, (wbo, ww) in enumerate(wide_parts(bo, w[1])):
                        out.append(f"{ind}  gf_put(o_, {wbo}, {ww}, S[GF_WSLOT({b + so}) + {i}]);")
                    continue
                out.append(f"{ind}  gf_put(o_, {bo}, {w}, S[{b + so}]);")
            out.append(f"{ind}  c->out_len += {nbytes}; }}")
            return
        if isinstance(t, StructT):
            for fname, ft in t.fields:
                off, _ = field_offset(t, fname)  # type: ignore[misc]
                self.emit(node, ft, place.at(off, ft), out, ind)
            return
        if isinstance(t, StackT):
            stride = slot_count(t.elem)
            for i in range(t.size):
                self.emit(node, t.elem, place.at(1 + i * stride, t.elem), out, ind)
            return
        raise self.fail(node, f"emit of {t}")
