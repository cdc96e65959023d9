"""C for header stacks, laid out as the Python pipeline lays them out: slot 0 of the stack holds
`nextIndex`, then `size` elements of `slot_count(elem)` slots each.

Covered: `extract(s.next)` (StackOutOfBounds before PacketTooShort, as `compile_packet.py`
checks them), `push_front(n)` / `pop_front(n)`, and emitting a whole stack. Other dynamic
places (`s.last`, `s[i]` with a run-time index) stay with the Python pipeline.
"""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiled import E
from p4switch.frontend.types import HeaderT, StackT, slot_count
from p4switch.native.cgen_expr import ExprGen


class StackGen(ExprGen):
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

    def stack_shift(self, node: Any, stack: E, method: str, count_node: Any, out: list[str], ind: str) -> None:
        """`s.push_front(n)` / `s.pop_front(n)`: elements move by n, the vacated ones are
        invalid with zero fields, nextIndex moves by n within 0 .. size."""
        t = stack.type
        assert isinstance(t, StackT)
        if stack.place is None or stack.place.base is None:
            raise self.fail(node, f"{method} on a stack that is not at a static place")
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
