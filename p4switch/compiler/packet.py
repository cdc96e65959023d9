"""packet_in and packet_out: extract (fixed and varbit headers), lookahead, advance, emit."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E, Fn, PacketParam, Place, Scope, _mask, generate
from p4switch.compiler.stmt import seq
from p4switch.frontend.types import (
    BitT, BoolT, HeaderT, P4Type, StackT, StructT, VarbitT, VoidT, field_offset, scalar_width,
    slot_count,
)
from p4switch.runtime import ParserError


class PacketCompiler:
    """Mixin of the Compiler: the packet_in and packet_out methods."""

    # -- packet_in / packet_out ----------------------------------------------------------------

    def _packet_method(self, node: Tree, param: PacketParam, method: str, args: list,
                       type_args: Any, scope: Scope) -> E:
        if param.kind == "packet_out":
            if method != "emit":
                raise self.type_error(node, f"packet_out has no method {method}")
            self._expect_args(node, "emit", args, 1)
            return E(VoidT(), self._emit(self.expr(args[0], scope), args[0]))
        if method == "extract":
            if len(args) == 2:
                target = self.lvalue(args[0], scope)
                return E(VoidT(), self._extract_varbit(target, self.scalar(args[1], scope).fn, args[0]))
            self._expect_args(node, "extract", args, 1)
            target = self.lvalue(args[0], scope)
            return E(VoidT(), self._extract(target, args[0]))
        if method == "advance":
            self._expect_args(node, "advance", args, 1)
            bits = self.scalar(args[0], scope).fn

            def advance(s: list) -> None:
                n = bits(s)
                ctx = s[0]
                if n % 8:
                    raise ParserError("ParserInvalidArgument")
                if ctx.pos + n // 8 > ctx.length:
                    raise ParserError("PacketTooShort")
                ctx.pos += n // 8
            return E(VoidT(), advance)
        if method == "length":
            return E(BitT(32), lambda s: s[0].length)
        if method == "lookahead":
            if type_args is None or len(type_args.children) != 1:
                raise self.type_error(node, "lookahead needs one type argument")
            return self._lookahead(node, self.resolve_type(type_args.children[0]))
        raise self.type_error(node, f"packet_in has no method {method}")

    def _lookahead(self, node: Tree, t: P4Type) -> E:
        if isinstance(t, BitT):
            width = t.width
            nbytes = (width + 7) // 8
            drop = nbytes * 8 - width
            m = _mask(width)

            def peek(s: list) -> int:
                ctx = s[0]
                if ctx.pos + nbytes > ctx.length:
                    raise ParserError("PacketTooShort")
                return (int.from_bytes(ctx.data[ctx.pos:ctx.pos + nbytes], "big") >> drop) & m
            return E(t, peek)
        if isinstance(t, HeaderT):
            layout = self._header_layout(t, node)
            nbytes = layout[0]

            def peek_header(s: list) -> list:
                ctx = s[0]
                if ctx.pos + nbytes > ctx.length:
                    raise ParserError("PacketTooShort")
                v = int.from_bytes(ctx.data[ctx.pos:ctx.pos + nbytes], "big")
                return [True] + [conv((v >> sh) & m) for sh, m, conv in layout[1]]
            return E(t, peek_header)
        if isinstance(t, StructT) and not t.is_union:
            # the struct's leaves, in order, from the next bits (any width; the rest of the last byte unread)
            leaves = self._struct_leaves(node, f"lookahead<{t}>", "", t)
            bits = sum(scalar_width(ft) for _, ft in leaves)
            nbytes = (bits + 7) // 8
            pad = [("$pad", BitT(8 - bits % 8))] if bits % 8 else []  # low bits of the last byte
            layout = self._header_layout(HeaderT(str(t), leaves + pad), node)[1][:len(leaves)]

            def peek_struct(s: list) -> list:
                ctx = s[0]
                if ctx.pos + nbytes > ctx.length:
                    raise ParserError("PacketTooShort")
                v = int.from_bytes(ctx.data[ctx.pos:ctx.pos + nbytes], "big")
                return [conv((v >> sh) & m) for sh, m, conv in layout]
            return E(t, peek_struct)
        raise self.unsupported(node, f"lookahead<{t}> is not supported")

    def _header_layout(self, t: HeaderT, node: Any, allow_varbit: bool = False) -> tuple[int, list]:
        """(bytes, [(shift, mask, conversion)]) of the fixed fields of a header."""
        bits = t.bit_width
        if t.varbit is not None and not allow_varbit:
            raise self.type_error(node, f"header {t.name} has a varbit field: extract it with "
                                        "the two-argument extract")
        if bits % 8 and t.varbit is None:
            raise self.type_error(node, f"header {t.name} is {bits} bits, not a whole number of bytes")
        fields = []
        acc = bits
        for _, ft in t.fields:
            if isinstance(ft, VarbitT):
                continue
            w = scalar_width(ft)
            acc -= w
            if isinstance(ft, BoolT):
                conv = bool
            elif isinstance(ft, BitT) and ft.signed:
                half = 1 << (w - 1)
                conv = lambda v, half=half, m=_mask(w): ((v + half) & m) - half  # noqa: E731
            else:
                conv = int
            fields.append((acc, _mask(w), conv))
        return bits // 8, fields

    def _extract(self, target: E, node: Any) -> Fn:
        t = target.type
        if not isinstance(t, HeaderT) or target.place is None:
            raise self.type_error(node, f"extract needs a header, got {t}")
        nbytes, layout = self._header_layout(t, node)
        place = target.place
        plain = all(conv is int for _, _, conv in layout)
        offsets = [(1 + i, sh, m) for i, (sh, m, _) in enumerate(layout)]
        convs = [conv for _, _, conv in layout]
        siblings = self._union_siblings(target)
        stack_next = self._stack_next_of(target)
        if place.base is not None and plain and not siblings:
            lines = [
                "def extract(s):",
                "    ctx = s[0]",
                "    p = ctx.pos",
                f"    end = p + {nbytes}",
                "    if end > ctx.length:",
                "        raise ParserError('PacketTooShort')",
                "    v = int.from_bytes(ctx.data[p:end], 'big')",
                "    ctx.pos = end",
            ]
            lines += [f"    s[{place.base + o}] = (v >> {sh}) & {m}" for o, sh, m in offsets]
            lines.append(f"    s[{place.base}] = True")
            env = {"ParserError": ParserError}
            fn = generate("\n".join(lines) + "\n", "extract", env)
            fn.lines, fn.env = [line[4:] for line in lines[1:]], env  # inlinable (see compile_stmt)
            return fn
        base_of = (lambda s: place.base) if place.base is not None else place.dyn
        bump = stack_next.writer() if stack_next is not None else None
        read_next = stack_next.reader() if stack_next is not None else None

        def extract(s: list) -> None:
            ctx = s[0]
            b = base_of(s)
            p = ctx.pos
            end = p + nbytes
            if end > ctx.length:
                raise ParserError("PacketTooShort")
            v = int.from_bytes(ctx.data[p:end], "big")
            ctx.pos = end
            for (o, sh, m), conv in zip(offsets, convs):
                s[b + o] = conv((v >> sh) & m)
            for clear in siblings:
                clear(s)
            s[b] = True
            if bump is not None:
                bump(s, read_next(s) + 1)
        return extract

    @staticmethod
    def _stack_next_of(target: E) -> Any:
        """The index slot to advance when `target` is `stack.next` or a member of `unions.next`."""
        extra = target.extra
        if isinstance(extra, tuple) and extra and extra[0] == "stack_next":
            return extra[1]
        if isinstance(extra, tuple) and len(extra) > 2 and extra[0] == "union_member":
            return extra[2]
        return None

    def _extract_varbit(self, target: E, length: Fn, node: Any) -> Fn:
        t = target.type
        if not isinstance(t, HeaderT) or t.varbit is None or target.place is None:
            raise self.type_error(node, "the two-argument extract needs a header with a varbit field")
        place = target.place
        _, layout = self._header_layout(t, node, allow_varbit=True)
        fixed_bits, vmax = t.bit_width, t.varbit.max_width
        fields = [(1 + i, sh, m, conv) for i, (sh, m, conv) in enumerate(layout)]
        vfield = len(t.fields)
        base_of = (lambda s: place.base) if place.base is not None else place.dyn  # a stack element
        siblings = self._union_siblings(target)
        stack_next = self._stack_next_of(target)
        bump = stack_next.writer() if stack_next is not None else None
        read_next = stack_next.reader() if stack_next is not None else None

        def extract_varbit(s: list) -> None:
            ctx = s[0]
            b = base_of(s)
            n = length(s)
            if n > vmax:
                raise ParserError("HeaderTooShort")
            total = fixed_bits + n
            if total % 8:
                raise ParserError("ParserInvalidArgument")
            p, end = ctx.pos, ctx.pos + total // 8
            if end > ctx.length:
                raise ParserError("PacketTooShort")
            v = int.from_bytes(ctx.data[p:end], "big")
            ctx.pos = end
            s[b + vfield] = (n, v & ((1 << n) - 1))
            fixed = v >> n
            for offset, sh, m, conv in fields:
                s[b + offset] = conv((fixed >> sh) & m)
            for clear in siblings:
                clear(s)
            s[b] = True
            if bump is not None:
                bump(s, read_next(s) + 1)
        return extract_varbit

    def _emit_varbit(self, t: HeaderT, place: Place, node: Any) -> Fn:
        _, layout = self._header_layout(t, node, allow_varbit=True)
        b, fixed_bits = place.base, t.bit_width
        assert b is not None
        fields = [(b + 1 + i, sh, m) for i, (sh, m, _) in enumerate(layout)]
        vslot = b + len(t.fields)

        def emit_varbit(s: list) -> None:
            if s[b]:
                fixed = 0
                for slot, sh, m in fields:
                    fixed |= (int(s[slot]) & m) << sh
                n, value = s[vslot]
                total = fixed_bits + n
                pad = (-total) % 8
                s[0].out.append((((fixed << n) | value) << pad).to_bytes((total + pad) // 8, "big"))
        return emit_varbit

    def _emit(self, target: E, node: Any) -> Fn:
        t = target.type
        if target.place is None:
            raise self.type_error(node, "emit needs a header, stack, union or struct lvalue")
        if isinstance(t, HeaderT) and t.varbit is not None:
            if target.place.base is None:
                raise self.unsupported(node, "emit of a dynamically indexed header")
            return self._emit_varbit(t, target.place, node)
        if isinstance(t, HeaderT):
            nbytes, layout = self._header_layout(t, node)
            place = target.place
            if place.base is None:
                raise self.unsupported(node, "emit of a dynamically indexed header")
            b = place.base
            terms = " | ".join(f"((s[{b + 1 + i}] & {m}) << {sh})" for i, (sh, m, _) in enumerate(layout))
            body = [f"if s[{b}]:", f"    s[0].out.append(({terms}).to_bytes({nbytes}, 'big'))"]
            fn = generate("def emit(s):\n" + "".join(f"    {line}\n" for line in body), "emit")
            fn.lines, fn.env = body, {}  # inlinable (see compile_stmt)
            return fn
        if isinstance(t, StructT):
            parts = []
            for fname, ft in t.fields:
                off, _ = field_offset(t, fname)  # type: ignore[misc]
                sub = target.place.at(off, ft)
                parts.append(self._emit(E(ft, place=sub), node))
            return seq(parts)
        if isinstance(t, StackT):
            stride = slot_count(t.elem)
            parts = [self._emit(E(t.elem, place=target.place.at(1 + i * stride, t.elem)), node)
                     for i in range(t.size)]
            return seq(parts)
        raise self.type_error(node, f"cannot emit a value of type {t}")


