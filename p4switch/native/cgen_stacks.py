"""C for header stacks and header unions, laid out as the Python pipeline lays them out: slot 0
of a stack holds `nextIndex`, then `size` elements of `slot_count(elem)` slots each; a union
is its member headers one after the other.

Covered: `extract(s.next)` (StackOutOfBounds before PacketTooShort, as `compile_packet.py`
checks them), `push_front(n)` / `pop_front(n)`, emitting a whole stack, and for unions
`extract(u.m)` / `extract(s.next.m)` and `u.m.setValid()`, which make the other members
invalid. Other dynamic places (`s.last` as a target, `s[i]` with a run-time index) stay
with the Python pipeline.
"""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E
from p4switch.frontend.types import HeaderT, StackT, StructT, field_offset, slot_count
from p4switch.native.cgen_expr import wide_offsets, wide_parts, wide_zero
from p4switch.native.cgen_varbit import VarbitGen


class StackGen(VarbitGen):
    """Mixin of the generator: header stacks."""

    template_c: list[int]

    def stack_of(self, node: Any, member_node: Any) -> tuple[int, StackT]:
        """(base slot, type) of the static stack that `member_node` (`s.next`) belongs to."""
        if not (isinstance(member_node, Tree) and member_node.data == "member"):
            raise self.fail(node, "extract into a stack element given other than as s.next")
        stack = self.e(member_node.children[0])
        if not isinstance(stack.type, StackT) or stack.place is None or stack.place.base is None:
            raise self.fail(node, "extract into a stack that is not at a static place")
        return stack.place.base, stack.type

    def extract_next(self, node: Any, member_node: Any, target: E, layout: tuple[int, list],
                     out: list[str], ind: str) -> None:
        """`pkt.extract(s.next)`: the element at nextIndex, then nextIndex + 1."""
        base, t = self.stack_of(node, member_node)
        if not isinstance(t.elem, HeaderT):
            raise self.fail(node, "extract into a stack of header unions")
        nbytes, fields = layout
        stride = slot_count(t.elem)
        out.append(f"{ind}{{ uint64_t i_ = S[{base}];")
        out.append(f"{ind}  if (i_ >= {t.size}) {{ err_ = {self.error_index('StackOutOfBounds')}; goto p_error; }}")
        out.append(f"{ind}  if (c->pos + {nbytes} > c->len) {{ err_ = {self.error_index('PacketTooShort')}; goto p_error; }}")
        out.append(f"{ind}  uint64_t *h_ = &S[{base + 1} + i_ * {stride}];")
        out.append(f"{ind}  const uint8_t *d_ = c->data + c->pos;")
        for so, bo, w in fields:
            out.append(f"{ind}  h_[{so}] = gf_get(d_, {bo}, {w});")
        out.append(f"{ind}  c->pos += {nbytes}; h_[0] = 1; S[{base}] = i_ + 1; }}")

    def union_place(self, node: Any, member_node: Any) -> tuple[list[str], str, int, list[tuple[int, int]], list[str]]:
        """For `u.m` with `u` at a static place or `s.next`: (lines computing the union's place,
        the C expression of its first slot, m's offset, the other members as (offset, slots),
        lines after a successful extract)."""
        if not (isinstance(member_node, Tree) and member_node.data == "member"):
            raise self.fail(node, "a union member given other than as u.m")
        union_node, name = member_node.children[0], str(member_node.children[1].children[0])
        u = self.e(union_node)
        t = u.type
        found = field_offset(t, name) if isinstance(t, StructT) and t.is_union else None
        if found is None:
            raise self.fail(node, f"member {name} of a header union")
        siblings = [(field_offset(t, f)[0], slot_count(ft)) for f, ft in t.fields if f != name]  # type: ignore[index]
        if u.place is not None and u.place.base is not None:
            return [], str(u.place.base), found[0], siblings, []
        base, st = self.stack_of(node, union_node)
        if str(union_node.children[1].children[0]) != "next":
            raise self.fail(node, "a union in a stack given other than as s.next")
        err = self.error_index("StackOutOfBounds")
        pre = [f"uint64_t i_ = S[{base}];", f"if (i_ >= {st.size}) {{ err_ = {err}; goto p_error; }}"]
        return pre, f"{base + 1} + i_ * {slot_count(st.elem)}", found[0], siblings, [f"S[{base}] = i_ + 1;"]

    def extract_union_member(self, node: Any, member_node: Any, layout: tuple[int, list],
                             out: list[str], ind: str) -> None:
        """`pkt.extract(u.m)`: m's fields, the other members invalid, then (in a stack of
        unions) nextIndex + 1."""
        pre, base, offset, siblings, post = self.union_place(node, member_node)
        nbytes, fields = layout
        wide = [(so, bo, w[1]) for so, bo, w in fields if isinstance(w, tuple)]
        if wide and pre:
            raise self.fail(node, "extract into a union in a stack with fields wider than 64 bits")
        out.append(f"{ind}{{ {' '.join(pre)}")
        out.append(f"{ind}  if (c->pos + {nbytes} > c->len) {{ err_ = {self.error_index('PacketTooShort')}; goto p_error; }}")
        out.append(f"{ind}  uint64_t *u_ = &S[{base}]; const uint8_t *d_ = c->data + c->pos;")
        if wide:  # every member's wide words cleared (the others become invalid), then m's read
            out.append(f"{ind}  {wide_zero(int(base), self.e(member_node.children[0]).type)}")
        for so, bo, w in fields:
            if isinstance(w, tuple):
                for i, (wbo, ww) in enumerate(wide_parts(bo, w[1])):
                    out.append(f"{ind}  S[GF_WSLOT({int(base) + offset + so}) + {i}] = gf_get(d_, {wbo}, {ww});")
                continue
            out.append(f"{ind}  u_[{offset + so}] = gf_get(d_, {bo}, {w});")
        for off, n in siblings:
            out.append(f"{ind}  memset(&u_[{off}], 0, {n} * sizeof(uint64_t));")
        out.append(f"{ind}  u_[{offset}] = 1; c->pos += {nbytes}; {' '.join(post)} }}")

    def union_set_valid(self, node: Any, member_node: Any, out: list[str], ind: str) -> None:
        """`u.m.setValid()`: the other members of the union become invalid; m, if invalid,
        starts with all fields 0 (BMv2's add_header)."""
        pre, base, offset, siblings, _ = self.union_place(node, member_node)
        if pre:
            raise self.fail(node, "setValid on a member of s.next")
        own = slot_count(self.e(member_node).type)
        out.append(f"{ind}{{ uint64_t *u_ = &S[{base}];")
        for off, n in siblings:
            out.append(f"{ind}  memset(&u_[{off}], 0, {n} * sizeof(uint64_t));")
        out.append(f"{ind}  if (!u_[{offset}]) memset(&u_[{offset}], 0, {own} * sizeof(uint64_t));")
        out.append(f"{ind}  u_[{offset}] = 1; }}")

    def stack_shift(self, node: Any, stack: E, method: str, count_node: Any, out: list[str], ind: str) -> None:
        """`s.push_front(n)` / `s.pop_front(n)`: elements move by n, the vacated ones are
        invalid with zero fields, nextIndex moves by n within 0 .. size."""
        t = stack.type
        assert isinstance(t, StackT)
        if stack.place is None or stack.place.base is None:
            raise self.fail(node, f"{method} on a stack that is not at a static place")
        if wide_offsets(t.elem):
            raise self.fail(node, f"{method} on a stack of headers with fields wider than 64 bits")
        count = self.e(count_node).const
        if not isinstance(count, int) or count < 0:
            raise self.fail(node, f"{method} with a count that is not a constant")
        base, stride, size = stack.place.base, slot_count(t.elem), t.size
        if any(self.template_c[base + 1:base + 1 + size * stride]):
            raise self.fail(node, f"{method} on a stack whose empty elements are not all zero")
        k = min(count, size)
        first, moved, vacated = base + 1, (size - k) * stride, k * stride
        if method == "push_front":
            out.append(f"{ind}memmove(&S[{first + vacated}], &S[{first}], {moved} * sizeof(uint64_t));")
            out.append(f"{ind}memset(&S[{first}], 0, {vacated} * sizeof(uint64_t));")
            out.append(f"{ind}S[{base}] = S[{base}] + {count} > {size} ? {size} : S[{base}] + {count};")
        else:
            out.append(f"{ind}memmove(&S[{first}], &S[{first + vacated}], {moved} * sizeof(uint64_t));")
            out.append(f"{ind}memset(&S[{first + moved}], 0, {vacated} * sizeof(uint64_t));")
            out.append(f"{ind}S[{base}] = S[{base}] > {count} ? S[{base}] - {count} : 0;")
