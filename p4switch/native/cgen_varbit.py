"""C for varbit fields. The field's slot holds its length in bits, as the first item of the
Python pipeline's `(length, value)`; its bits live beside the slots, MSB first, in
`c->vb[gf_vb_of_slot[slot]]` (GF_VBBYTES bytes each, one buffer per varbit slot of the
program, so stack elements have their own).

Covered: the two-argument `extract` (HeaderTooShort, ParserInvalidArgument, PacketTooShort
in the Python pipeline's order; into `s.next` too), emitting a header with a varbit field,
and varbit fields in checksum and hash data. Other uses (assigning a varbit, copying a
header that has one) stay with the Python pipeline.
"""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E
from p4switch.frontend.types import BitT, BoolT, EnumT, HeaderT, P4Type, VarbitT, slot_count
from p4switch.native.cgen_expr import ExprGen, width_of

VB_BYTES = 256  # GF_VBBYTES: the widest varbit covered is 2,048 bits
VARBIT_LEAF = -1  # the width of a leaf that is a varbit field (its code is the slot)


class VarbitGen(ExprGen):
    """Mixin of the generator: varbit fields."""

    template_c: list[int]
    vb_slots: list[int]

    def vb_buffer(self, slot_code: str) -> str:
        return f"c->vb[gf_vb_of_slot[{slot_code}]]"

    def varbit_layout(self, t: HeaderT, node: Any) -> tuple[int, list[tuple[int, int, int]], int, int]:
        """(fixed bits, [(slot offset, bit offset, width)] of the fixed fields, the varbit's
        slot offset, its maximum width) of a header whose last field is a varbit."""
        vt = t.varbit
        if vt is None or not isinstance(t.fields[-1][1], VarbitT):
            raise self.fail(node, "a header whose varbit field is not the last")
        if vt.max_width > VB_BYTES * 8:
            raise self.fail(node, f"varbit<{vt.max_width}> (wider than {VB_BYTES * 8} bits)")
        off, fields = self.fixed_fields(t.fields[:-1], node)
        return off, fields, len(t.fields), vt.max_width

    def fixed_fields(self, fields: list[tuple[str, Any]], node: Any,
                     wide: bool = False) -> tuple[int, list[tuple[int, int, Any]]]:
        """(bits, [(slot offset, bit offset, width)]) of a header's fixed-width fields (an
        int<N> field's width is `GF_SIGNED(N)`: gf_get sign-extends it)."""
        out, off = [], 0
        for i, (_, ft) in enumerate(fields):
            if isinstance(ft, EnumT) and ft.repr is not None:
                ft = ft.repr  # a serializable enum: its values are its underlying bits
            if not isinstance(ft, BitT | BoolT):
                raise self.fail(node, f"header field of type {ft}")
            if wide and isinstance(ft, BitT) and ft.width > 64:
                out.append((1 + i, off, ("wide", ft.width)))
                off += ft.width
                continue
            self.check_type(ft, node)
            w = width_of(ft)
            out.append((1 + i, off, f"GF_SIGNED({w})" if isinstance(ft, BitT) and ft.signed else w))
            off += w
        return off, out

    def extract_varbit(self, node: Any, target_node: Any, target: E, length_node: Any,
                       out: list[str], ind: str) -> None:
        """`pkt.extract(h, bits)`, `h` at a static place or `s.next`."""
        t = target.type
        assert isinstance(t, HeaderT)
        fixed, fields, vslot, vmax = self.varbit_layout(t, node)
        pre: list[str] = []
        post: list[str] = []
        if target.place is not None and target.place.base is not None:
            base = str(target.place.base)
        elif isinstance(target.extra, tuple) and target.extra and target.extra[0] == "stack_next":
            sbase, st = self.stack_of(node, target_node)
            err = self.error_index("StackOutOfBounds")
            pre = [f"uint64_t i_ = S[{sbase}];", f"if (i_ >= {st.size}) {{ err_ = {err}; goto p_error; }}"]
            base, post = f"{sbase + 1} + i_ * {slot_count(st.elem)}", [f"S[{sbase}] = i_ + 1;"]
        else:
            raise self.fail(node, "a varbit extract into a dynamic place")
        out.append(f"{ind}{{ {' '.join(pre)}")
        out.append(f"{ind}  uint64_t n_ = {self.cx(length_node)};")
        out.append(f"{ind}  if (n_ > {vmax}) {{ err_ = {self.error_index('HeaderTooShort')}; goto p_error; }}")
        out.append(f"{ind}  if (({fixed} + n_) % 8) {{ err_ = {self.error_index('ParserInvalidArgument')}; goto p_error; }}")
        out.append(f"{ind}  uint32_t nb_ = (uint32_t)(({fixed} + n_) / 8);")
        out.append(f"{ind}  if (c->pos + nb_ > c->len) {{ err_ = {self.error_index('PacketTooShort')}; goto p_error; }}")
        out.append(f"{ind}  uint64_t b_ = {base}, *h_ = &S[b_]; const uint8_t *d_ = c->data + c->pos;")
        for so, bo, w in fields:
            out.append(f"{ind}  h_[{so}] = gf_get(d_, {bo}, {w});")
        out.append(f"{ind}  h_[{vslot}] = n_; gf_vb_load({self.vb_buffer(f'b_ + {vslot}')}, d_, {fixed}, (uint32_t)n_);")
        out.append(f"{ind}  c->pos += nb_; h_[0] = 1; {' '.join(post)} }}")

    def emit_varbit(self, node: Any, t: HeaderT, base: int, out: list[str], ind: str) -> None:
        """Emit a valid header with a varbit field: its fixed fields, then the field's bits,
        padded with zero bits to a whole byte."""
        fixed, fields, vslot, _ = self.varbit_layout(t, node)
        out.append(f"{ind}if (S[{base}]) {{ uint64_t n_ = S[{base + vslot}]; uint32_t nb_ = (uint32_t)(({fixed} + n_ + 7) / 8);")
        out.append(f"{ind}  if (c->out_len + nb_ <= GF_MAXFRAME) {{ uint8_t *o_ = c->out + c->out_len; memset(o_, 0, nb_);")
        for so, bo, w in fields:
            out.append(f"{ind}    gf_put(o_, {bo}, {w}, S[{base + so}]);")
        out.append(f"{ind}    gf_vb_store(o_, {fixed}, {self.vb_buffer(str(base + vslot))}, (uint32_t)n_);")
        out.append(f"{ind}    c->out_len += nb_; }} }}")

    # -- data lists with varbit fields (checksums, hashes) ---------------------------------------

    def leaves(self, node: Any) -> list[tuple[str, int]]:
        if not (isinstance(node, Tree) and node.data == "list_expr"):
            e = self.e(node)
            if isinstance(e.type, VarbitT):
                if e.place is None or e.place.base is None:
                    raise self.fail(node, "a varbit field at a dynamic place in data")
                return [(str(e.place.base), VARBIT_LEAF)]
        return super().leaves(node)

    def place_leaves(self, t: P4Type, base: int, node: Any) -> list[tuple[str, int]]:
        if isinstance(t, HeaderT) and t.varbit is not None:
            _, _, vslot, _ = self.varbit_layout(t, node)
            fixed = HeaderT(t.name, t.fields[:-1], groups=t.groups)
            return super().place_leaves(fixed, base, node) + [(str(base + vslot), VARBIT_LEAF)]
        return super().place_leaves(t, base, node)

    def pack(self, leaves: list[tuple[str, int]], buf: str) -> tuple[list[str], Any]:
        if all(w != VARBIT_LEAF for _, w in leaves):
            return super().pack(leaves, buf)
        fixed = sum(w for _, w in leaves if w != VARBIT_LEAF)
        cap = (fixed + 7) // 8 + VB_BYTES * sum(1 for _, w in leaves if w == VARBIT_LEAF)
        lines = [f"uint8_t {buf}[{cap}]; memset({buf}, 0, sizeof {buf}); uint32_t {buf}o = 0;"]
        for code, w in leaves:
            if w == VARBIT_LEAF:
                lines.append(f"gf_vb_store({buf}, {buf}o, {self.vb_buffer(code)}, (uint32_t)S[{code}]); "
                             f"{buf}o += (uint32_t)S[{code}];")
            else:
                lines.append(f"gf_put({buf}, {buf}o, {w}, {code}); {buf}o += {w};")
        return lines, f"(({buf}o + 7) / 8)"

