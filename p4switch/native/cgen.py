"""The C source of one program: parser, controls, actions, tables and the packet entry points.

`generate_c(compiled, recorded)` walks the six v1model blocks of the recorded compilation
and writes one C file that includes the runtime (`gf_runtime.h`, `gf_state.h`) and, when
asked, the switch loops (`gf_switch.h`). Raises NativeUnsupported naming the first construct
the backend does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from p4switch.compiler.compiled import ActionImpl, CompiledProgram
from p4switch.errors import P4SwitchError
from p4switch.frontend.types import BitT
from p4switch.hashes import ALGORITHMS
from p4switch.native.cgen_expr import NativeUnsupported, lit, width_of
from p4switch.native.cgen_functions import FunctionGen
from p4switch.native.cgen_loops import LoopGen
from p4switch.native.cgen_stmt import HASHES
from p4switch.native.cgen_varbit import VB_BYTES
from p4switch.native.recorder import Recorded
from p4switch.tables import MATCH_KINDS

_ROLES = ("parser", "verify", "ingress", "egress", "compute", "deparser")
_UNSUPPORTED_EXTERNS: tuple[str, ...] = ()
#: Externs the switch loops of gf_switch.h do not run (NativePipeline.process does).
_LOOP_EXTERNS = ("resubmit", "resubmit_preserving_field_list", "recirculate", "recirculate_preserving_field_list")
#: Slots of the packet's own after the program's: their macro names and what they hold.
_OWN_SLOTS = (("GF_TRUNCATE", "truncate(n): the frame leaves cut to n bytes (0: whole)"),
              ("GF_CLONE", "clone requested: 0 none, 1 I2E (end of ingress), 2 E2E (end of egress)"),
              ("GF_CLONE_SESSION", "the clone session"),
              ("GF_CLONE_FL", "1 + the field list the clone keeps (0: none)"),
              ("GF_RESUBMIT", "resubmit requested: 0 none, else 1 + (1 + the field list it keeps, 0: none)"),
              ("GF_RECIRC", "recirculate requested: 0 none, else 1 + (1 + the field list it keeps, 0: none)"))


_SELECTOR_ALGORITHMS = {fn: name for name, fn in ALGORITHMS.items()}


def _name(node: Any) -> str:
    return str(node.children[0]) if isinstance(node, Tree) else str(node)


def key_words(width: int) -> list[int]:
    """The widths of the words a key of `width` bits is matched as in C, most significant
    first (one word up to 64 bits)."""
    n = (width + 63) // 64
    return [width - 64 * (n - 1)] + [64] * (n - 1) if n > 1 else [width]


MAX_KEYS = 64  # key fields a table may have natively (GF_MAXK is the program's largest)

class ProgramGen(LoopGen, FunctionGen):
    """One C translation of one recorded compilation."""

    def __init__(self, compiled: CompiledProgram, rec: Recorded) -> None:
        self.compiled, self.rec = compiled, rec
        # Error codes in declaration order, as the Python pipeline and BMv2 number them (a table
        # key of type error holds these codes); errors first named later are appended.
        self.errors: list[str] = list(compiled.info.error_members) or ["NoError"]
        self.enums: dict[tuple[str, str], int] = {}
        self.std = compiled.std
        self.table_names = list(compiled.tables)
        self.table_ids = {n: i for i, n in enumerate(self.table_names)}
        self.counter_ids = {n: i for i, n in enumerate(compiled.counters)}
        self.register_ids = {n: i for i, n in enumerate(compiled.registers)}
        self.meter_ids = {n: i for i, n in enumerate(compiled.meters)}
        self.impl_nodes = rec.impl_nodes
        self.action_fns: dict[int, str] = {}
        self.action_defs: list[list[str]] = []
        self.function_fns: dict[int, str] = {}
        self.compound_fns: set[str] = set()  # functions returning a header or struct (into r_)
        self.function_defs: list[list[str]] = []
        self.instance_fns: dict[int, str] = {}
        self.switch_reason = ""  # why the switch loops cannot run the program ("": they can)
        self.sub_parsers: set[str] = set()  # instance functions that are parsers applied in a parser
        self.fn_ret: Any = None  # the return type while a function's body is generated
        self.faults: list[P4SwitchError] = []  # the errors that fail a packet, by fault code - 1
        self.log_formats: list[str] = []  # the texts of log_msg calls, by GF_LOG_ID offset
        self.exit_label: str | None = None
        self.in_parser = False
        self.has_exit = False
        self.template_c: list[int] = []
        self.vb_slots: list[int] = []
        self.loops: list[int] = []  # label numbers of the enclosing loops, innermost last
        # bit<N> values, N > 64: the k-th wide slot's words are S[GF_WBASE + k * GF_WW ...]
        self.wide_index = {slot: k for k, slot in enumerate(sorted(rec.wide))}
        self.wide_words_per = max([1] + [(w + 63) // 64 for w in rec.wide.values()])
        self.label_count = 0

    # -- checks -----------------------------------------------------------------------------------

    def precheck(self) -> None:
        c = self.compiled
        kinds = [k for k, _ in self.rec.blocks]
        if kinds != ["parser"] + ["control"] * 5:
            raise NativeUnsupported("blocks other than V1Switch's parser and five controls")
        bodies = [node for _, node in self.rec.blocks] + [node for node, _, _ in self.rec.instances.values()] \
            + [node for node, _ in self.rec.function_bodies.values()]
        # a call of an extern without a body, a failed assert: the packet fails, every block is left
        self.has_exit = bool(self.rec.missing_externs or self.rec.assertions)
        for node in bodies:
            for sub in node.iter_subtrees():
                if sub.data in ("call", "method_call_stmt") and isinstance(sub.children[0], Tree) \
                        and sub.children[0].data == "var" and _name(sub.children[0]) in _UNSUPPORTED_EXTERNS:
                    raise self.fail(sub, f"extern {_name(sub.children[0])}")
                if sub.data in ("call", "method_call_stmt") and isinstance(sub.children[0], Tree) \
                        and sub.children[0].data == "var" and _name(sub.children[0]) in _LOOP_EXTERNS:
                    self.switch_reason = self.switch_reason or f"extern {_name(sub.children[0])}{self.where(sub) and ' (' + self.where(sub) + ')'}"
                if sub.data == "exit_stmt":
                    self.has_exit = True
        for name, table in c.tables.items():
            if len(table.keys) > MAX_KEYS:
                raise NativeUnsupported(f"table {name}: more than {MAX_KEYS} key fields")
            for key in table.keys:
                if key.match_kind not in MATCH_KINDS or key.bitwidth > 64 and key.match_kind not in (
                        "exact", "ternary", "lpm"):
                    raise NativeUnsupported(f"table {name}: key {key.name}, {key.match_kind} wider than 64 bits")
            if sum(len(key_words(key.bitwidth)) for key in table.keys) > MAX_KEYS:
                raise NativeUnsupported(f"table {name}: more than {MAX_KEYS} key words")
            for spec in table.actions.values():
                if len(spec.param_widths) > 16 or any(w > 64 for w in spec.param_widths):
                    raise NativeUnsupported(f"table {name}: action {spec.name} data wider than 64 bits")
        for pname, profile in c.action_profiles.items():
            users = [t for t in c.tables.values() if t.profile is profile]
            if any(list(t.actions) != list(users[0].actions) for t in users):
                raise NativeUnsupported(f"action profile {pname}: tables that list its actions differently")
            if profile.with_selector and _SELECTOR_ALGORITHMS.get(profile.selector) not in HASHES:
                raise NativeUnsupported(f"action selector {pname}: its hash algorithm")
        for rname, reg in c.registers.items():
            if reg.width > 64:
                raise NativeUnsupported(f"register {rname}: values wider than 64 bits")
        for index, slots in c.field_lists.items():
            if any(slot in self.rec.wide for slot in slots):
                raise NativeUnsupported(f"field list {index}: a field wider than 64 bits")
        for m in c.meters.values():
            if getattr(m, "direct_table", None):
                raise NativeUnsupported("direct meters")
        self.template_c = [0] + [self.slot_value(v, None) for v in c.template[1:]]
        self.vb_slots = [i for i, v in enumerate(c.template) if isinstance(v, tuple)]

    def vb_map(self) -> str:
        """gf_vb_of_slot: each varbit slot's buffer, -1 elsewhere."""
        index = {slot: k for k, slot in enumerate(self.vb_slots)}
        return ", ".join(str(index.get(i, -1)) for i in range(len(self.template_c)))

    # -- actions and tables ------------------------------------------------------------------------

    def action_fn(self, impl: ActionImpl, where: Any) -> str:
        fname = self.action_fns.get(id(impl))
        if fname is not None:
            return fname
        node = self.impl_nodes.get(id(impl))
        if node is None:
            bound = self.rec.bound_actions.get(id(impl))
            if bound is None:
                raise self.fail(where, f"action {impl.name} bound with arguments in a table")
            return self.bound_action_fn(impl, *bound)
        fname = f"a{len(self.action_fns)}"
        self.action_fns[id(impl)] = fname
        saved = (self.exit_label, self.in_parser, self.fn_ret, self.rec)
        self.exit_label, self.in_parser, self.fn_ret = None, False, None
        self.rec = self.rec.action_context.get(id(impl), self.rec)  # where its body was compiled
        body: list[str] = [f"/* {impl.name} */", f"static void {fname}(gf_ctx *c) {{"]
        self.stmts(node.children[3].children[1:], body, "    ")
        body.append("}")
        self.exit_label, self.in_parser, self.fn_ret, self.rec = saved
        self.action_defs.append(body)
        return fname

    def bound_action_fn(self, impl: ActionImpl, action: ActionImpl, args: list, ref: Any) -> str:
        """`actions = { a(x); }`: a function that copies the bound arguments in, runs `a` and
        copies them out (also after `exit`, as the Python pipeline does)."""
        fname = f"a{len(self.action_fns)}"
        self.action_fns[id(impl)] = fname
        lines: list[str] = []
        self.call_action(ref, action, args, lines, "    ")  # type: ignore[attr-defined]
        self.action_defs.append([f"/* {impl.name}, bound */", f"static void {fname}(gf_ctx *c) {{", *lines, "}"])
        return fname

    def table_fn(self, name: str) -> list[str]:
        saved = self.rec
        self.rec = self.rec.table_context.get(name, self.rec)  # its keys were compiled there
        try:
            return self._table_fn(name)
        finally:
            self.rec = saved

    def _table_fn(self, name: str) -> list[str]:
        tid = self.table_ids[name]
        table = self.compiled.tables[name]
        impls = self.rec.table_actions.get(name)
        if impls is None:
            raise NativeUnsupported(f"table {name} was not compiled")
        keys: list[str] = []
        for k in self.rec.table_keys[name]:
            t = self.e(k).type
            if isinstance(t, BitT) and t.width > 64:  # its words, most significant first
                keys += reversed(self.wide_words(k, t.width))
            else:
                keys.append(self.unsigned(k))  # an int<N> key: its bits
        counted = self.rec.table_counted.get(name, False)
        out = [f"static int t{tid}_apply(gf_ctx *c) {{ /* {name} */"]
        out.append(f"    uint64_t k_[{max(len(keys), 1)}] = {{{', '.join(keys) or '0'}}};")
        out.append(f"    gf_table *t_ = &P->tables[{tid}];")
        out.append(f"    gf_entry *e_ = {'gf_lookup(t_, k_)' if keys else '0'};")
        out.append("    int32_t a_ = 0; const uint64_t *d_ = 0;")
        out.append("    if (e_) { a_ = e_->action; d_ = e_->args; }")
        if table.profile is not None:
            out += self.profile_pick(name, table.profile)
        out.append("    if (e_) { c->hit = 1;")
        if counted:
            out.append("        __atomic_fetch_add(&e_->packets, 1, __ATOMIC_RELAXED);"
                       " __atomic_fetch_add(&e_->bytes, c->len, __ATOMIC_RELAXED);")
        out.append("    } else { c->hit = 0; a_ = t_->def_action; d_ = t_->def_args; }")
        out.append("    (void)d_;")
        out.append("    switch (a_) {")
        for i, aname in enumerate(table.actions):
            impl = impls.get(aname)
            if impl is None:
                raise NativeUnsupported(f"table {name}: action {aname} not compiled")
            fname = self.action_fn(impl, None)
            loads = " ".join(f"S[{slot}] = d_[{j}];" for j, slot in enumerate(impl.data_slots))
            out.append(f"    case {i}: {loads} {fname}(c); break;")
        out.append("    default: break;")
        out.append("    }")
        out.append("    return a_;")
        out.append("}")
        return out

    def profile_pick(self, name: str, profile: Any) -> list[str]:
        """C resolving an entry that names a member or group of the table's action profile
        (a member of a group is picked as `ActionProfile.group_action` picks it)."""
        pid = list(self.compiled.action_profiles).index(profile.name)
        out = [f"    if (e_ && (a_ == GF_REF_MEMBER || a_ == GF_REF_GROUP)) {{",
               "        uint64_t h_ = 0;"]
        if profile.with_selector:
            leaves = [(self.cx(k), width_of(self.e(k).type)) for k in self.rec.table_selectors.get(name, [])]
            lines, n = self.pack(leaves, "sb_")
            algo = HASHES[_SELECTOR_ALGORITHMS[profile.selector]].format(b="sb_", n=n)
            w = profile.output_width
            out.append("        if (a_ == GF_REF_GROUP) {")
            out += [f"            {line}" for line in lines]
            out.append(f"            h_ = {algo}{f' & {lit((1 << w) - 1)}' if 0 < w < 64 else ''};")
            out.append("        }")
        out.append(f"        const gf_member *m_ = gf_profile_pick(&P->profiles[{pid}], a_, d_[0], h_);")
        out.append("        if (m_) { a_ = m_->action; d_ = m_->args; } else e_ = 0;")
        out.append("    }")
        return out

    # -- blocks ------------------------------------------------------------------------------------

    def control(self, role: str, node: Tree) -> list[str]:
        children = node.children
        apply_index = next(i for i, ch in enumerate(children) if isinstance(ch, Token) and ch.type == "APPLY")
        self.exit_label, self.in_parser = f"done_{role}", False
        out = [f"static void ctl_{role}(gf_ctx *c) {{"]
        for item in children[5:apply_index]:
            if isinstance(item, Tree) and item.data == "var_decl":
                self._st_var_decl(item, out, "    ")
        self.stmt(children[apply_index + 1], out, "    ")
        out.append(f"done_{role}: ;")
        out.append("}")
        return out

    def parser(self, node: Tree, name: str = "parser", sub: bool = False) -> list[str]:
        """The C function of the parser; with `sub`, of a parser applied inside a parser: it
        returns 0 when it accepts, 1 when it rejects, 2 + the error code of an error."""
        self.exit_label, self.in_parser = None, True
        children = node.children
        states = [ch for ch in children[5:] if isinstance(ch, Tree) and ch.data == "parser_state"]
        out = [f"static {'uint64_t' if sub else 'void'} ctl_{name}(gf_ctx *c) {{",
               "    uint64_t err_ = 0; int steps_ = 0;"]
        for item in children[5:]:
            if isinstance(item, Tree) and item.data == "var_decl":
                self._st_var_decl(item, out, "    ")
        out.append("    goto st_start;")
        timeout = self.error_index("ParserTimeout")
        for st in states:
            _annos, _tok, name_node, *rest = st.children
            transition = rest[-1] if rest and isinstance(rest[-1], Tree) and rest[-1].data.startswith("transition") else None
            stmts = rest[:-1] if transition is not None or (rest and rest[-1] is None) else rest
            out.append(f"st_{_name(name_node)}:")
            out.append(f"    if (++steps_ > 1000) {{ err_ = {timeout}; goto p_error; }}")
            self.stmts([s for s in stmts if s is not None], out, "    ")
            if transition is None:
                out.append("    goto p_reject;")
            elif transition.data == "transition_direct":
                out.append(f"    {self.goto_state(_name(transition.children[0]))}")
            else:
                self.select(transition.children[0], out)
        if sub:
            out += ["p_reject: return 1;", "p_error: return 2 + err_;", "st_accept: return 0;", "}"]
            return out
        out += ["p_reject: goto p_done;",
                f"p_error: S[{self.std['parser_error']}] = err_; goto p_done;",
                "st_accept: ;", "p_done: c->payload_off = c->pos;", "}"]
        return out

    @staticmethod
    def goto_state(target: str) -> str:
        return "goto p_reject;" if target == "reject" else f"goto st_{target};"

    def select(self, node: Tree, out: list[str]) -> None:
        exprs = [ch for ch in node.children[0].children if ch is not None]
        keys = [self.cx(e) for e in exprs]
        out.append("    {")
        for i, k in enumerate(keys):
            out.append(f"    uint64_t k{i}_ = {k};")
        for case in node.children[1:]:
            ks, target_node = case.children
            target = _name(target_node)
            vid = self.value_set_of(ks)
            if vid is not None:
                self.select_value_set(vid, len(keys), target, out)
                continue
            sets = ks.children if isinstance(ks, Tree) and ks.data == "tuple_keyset" else [ks]
            if len(sets) == 1 and len(keys) > 1 and isinstance(ks, Tree) and ks.data in (
                    "default_keyset", "dontcare_keyset"):
                sets = sets * len(keys)
            conds = []
            for i, st in enumerate(sets):
                kind = st.data if isinstance(st, Tree) else ""
                if kind in ("default_keyset", "dontcare_keyset"):
                    continue
                if kind == "mask_keyset":
                    v, m = self.case_value(st.children[0]), self.case_value(st.children[1])
                    conds.append(f"(k{i}_ & {lit(m)}) == {lit(v & m)}")
                elif kind == "range_keyset":
                    lo, hi = self.case_value(st.children[0]), self.case_value(st.children[1])
                    conds.append(f"(k{i}_ >= {lit(lo)} && k{i}_ <= {lit(hi)})")
                else:
                    conds.append(f"k{i}_ == {lit(self.case_value(st))}")
            out.append(f"    if ({' && '.join(conds) or '1'}) {self.goto_state(target)}")
        out.append(f"    err_ = {self.error_index('NoMatch')}; goto p_error;")
        out.append("    }")

    def value_set_of(self, keyset: Any) -> int | None:
        """The index of the value set a select case names, or None."""
        if not (isinstance(keyset, Tree) and keyset.data == "var"):
            return None
        name = _name(keyset)
        found = [i for i, q in enumerate(self.compiled.value_sets) if q == name or q.endswith("." + name)]
        return found[0] if len(found) == 1 else None

    def select_value_set(self, vid: int, nkeys: int, target: str, out: list[str]) -> None:
        """A case matching any member of a value set (`ValueSet.matches`)."""
        vset = list(self.compiled.value_sets.values())[vid]
        conds = []
        for j, (_, _, kind) in enumerate(vset.fields[:nkeys]):
            a, b = f"m_[{2 * j}]", f"m_[{2 * j + 1}]"
            conds.append(f"(k{j}_ >= {a} && k{j}_ <= {b})" if kind == "range" else f"(k{j}_ & {b}) == {a}")
        out.append(f"    for (uint32_t i_ = 0; i_ < P->vsets[{vid}].n; i_++) {{")
        out.append(f"        const uint64_t *m_ = &P->vsets[{vid}].items[i_ * P->vsets[{vid}].stride];")
        out.append(f"        if ({' && '.join(conds) or '1'}) {self.goto_state(target)}")
        out.append("    }")

    def case_value(self, node: Any) -> int:
        e = self.e(node)
        if not e.is_const:
            raise self.fail(node, "select case that is not a constant (a value set?)")
        if isinstance(e.const, bool):
            return int(e.const)
        if isinstance(e.const, str):
            raise self.fail(node, "select on an error or enum")
        return int(e.const) & 0xFFFFFFFFFFFFFFFF

    # -- the file ----------------------------------------------------------------------------------

    def generate(self, with_switch: bool = True) -> str:
        self.precheck()
        blocks = {role: node for role, (_, node) in zip(_ROLES, self.rec.blocks)}
        bodies: list[list[str]] = [self.parser(blocks["parser"])]
        for role in _ROLES[1:]:
            bodies.append(self.control(role, blocks[role]))
        tables = [self.table_fn(n) for n in self.table_names]
        # action functions may have been generated while generating other bodies
        c = self.compiled
        first = len(self.template_c)  # the program's slots, then the packet's own, then wide words:
        wbase = first + len(_OWN_SLOTS)
        nwide = len(self.wide_index) * self.wide_words_per
        nslots = wbase + nwide
        std = self.std
        lines = [
            "/* Generated from the P4 program by p4switch.native; do not edit. */",
            "#define _GNU_SOURCE",
            f"#define GF_NSLOTS {nslots}",
            f"#define GF_MAXK {max([8] + [sum(len(key_words(k.bitwidth)) for k in t.keys) for t in c.tables.values()])}"
            "  /* key words per table */",
            f"#define GF_WBASE {wbase}  /* the words of bit<N> values, N > 64 */",
            f"#define GF_WW {self.wide_words_per}  /* words per such value */",
            "#define GF_WSLOT(slot) (GF_WBASE + gf_w_of_slot[slot] * GF_WW)",
            *(f"#define {name} {first + k}  /* {what} */" for k, (name, what) in enumerate(_OWN_SLOTS)),
            '#include "gf_state.h"',
            "typedef struct gf_ctx {",
            "    uint64_t s[GF_NSLOTS];",
            "    const uint8_t *data; uint32_t len, pos, payload_off;",
            "    uint64_t now_us, rng; int exit_flag, hit;",
            "    gf_prog *p; uint8_t *out; uint32_t out_len;",
            "    uint32_t ndig; uint64_t dig[GF_DIGEST_WORDS];  /* digests: [id, n, values...] ... */",
            "    int fault;  /* 1 + the index of the error that fails the packet (an extern without a body) */",
            "    uint32_t full_len;  /* the deparsed frame's length before truncate (for E2E clones) */",
            f"    uint8_t vb[{max(len(self.vb_slots), 1)}][{VB_BYTES}];  /* the bits of each varbit slot */",
            "} gf_ctx;",
            "#define S (c->s)",
            "#define P (c->p)",
            f"static const uint64_t gf_template[GF_NSLOTS] = "
            f"{{{', '.join(lit(v) for v in self.template_c + [0] * (len(_OWN_SLOTS) + nwide))}}};",
            f"static const int16_t gf_vb_of_slot[GF_NSLOTS] = {{{self.vb_map()}{', -1' * (len(_OWN_SLOTS) + nwide)}}};",
            f"static const int32_t gf_w_of_slot[GF_NSLOTS] = "
            f"{{{', '.join(str(self.wide_index.get(i, -1)) for i in range(nslots))}}};",
        ]
        lines += [f"static void {fn}(gf_ctx *c);" for fn in self.action_fns.values()]
        lines += [f"static uint64_t {fn}(gf_ctx *c{', uint64_t *r_' if fn in self.compound_fns else ''});"
                  for fn in self.function_fns.values()]
        lines += [f"static {'uint64_t' if fn in self.sub_parsers else 'void'} ctl_{fn}(gf_ctx *c);"
                  for fn in self.instance_fns.values()]
        lines += [f"static int t{i}_apply(gf_ctx *c);" for i in range(len(self.table_names))]
        for body in self.action_defs + self.function_defs + tables + bodies:
            lines += body
        descs = []
        for name in self.table_names:
            t = c.tables[name]
            # a key wider than 64 bits: its words; an LPM one's as ternary words (the table is
            # then searched by rank, which is the prefix length, longest first)
            words = [("ternary" if k.match_kind == "lpm" and k.bitwidth > 64 else k.match_kind, w)
                     for k in t.keys for w in key_words(k.bitwidth)]
            kinds = ", ".join(str(MATCH_KINDS.index(kind)) for kind, _ in words) or "0"
            widths = ", ".join(str(w) for _, w in words) or "0"
            descs.append(f"{{{len(words)}, {{{kinds}}}, {{{widths}}}}}")
        csizes = ", ".join(str(x.size) for x in c.counters.values()) or "0"
        rsizes = ", ".join(str(x.size) for x in c.registers.values()) or "0"
        rwidths = ", ".join(str(x.width) for x in c.registers.values()) or "0"
        msizes = ", ".join(str(x.size) for x in c.meters.values()) or "0"
        mbytes = ", ".join("1" if x.unit == "bytes" else "0" for x in c.meters.values()) or "0"
        lines += [
            f"static const gf_table_desc gf_tds[] = {{{', '.join(descs) or '{0, {0}, {0}}'}}};",
            f"static const uint32_t gf_csizes[] = {{{csizes}}};",
            f"static const uint32_t gf_rsizes[] = {{{rsizes}}};",
            f"static const unsigned gf_rwidths[] = {{{rwidths}}};",
            f"static const uint32_t gf_msizes[] = {{{msizes}}};",
            f"static const int gf_mbytes[] = {{{mbytes}}};",
            "GF_EXPORT gf_prog *gf_prog_create(void) {",
            f"    return gf_prog_new({len(self.table_names)}, gf_tds, {len(c.counters)}, gf_csizes, "
            f"{len(c.registers)}, gf_rsizes, gf_rwidths, {len(c.meters)}, gf_msizes, gf_mbytes, "
            f"{len(c.action_profiles)}, {len(c.value_sets)});",
            "}",
            "static void gf_ingress_run(gf_ctx *c, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now) {",
            "    memcpy(c->s, gf_template, sizeof c->s);",
            "    c->data = data; c->len = len; c->pos = 0; c->payload_off = 0; c->now_us = now; c->exit_flag = 0;",
            "    c->ndig = 0; c->fault = 0;",
            f"    S[{std['ingress_port']}] = port; S[{std['instance_type']}] = 0; S[{std['packet_length']}] = len;",
            f"    S[{std['ingress_global_timestamp']}] = now;",
            "    ctl_parser(c); ctl_verify(c); c->exit_flag = 0; if (!c->fault) ctl_ingress(c);",
            "}",
            "/* A clone's own parse of `data` (the original frame, or the deparsed one for E2E). */",
            "static void gf_clone_parse(gf_ctx *c, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now) {",
            "    memcpy(c->s, gf_template, sizeof c->s);",
            "    c->data = data; c->len = len; c->pos = 0; c->payload_off = 0; c->now_us = now; c->exit_flag = 0;",
            "    c->ndig = 0; c->fault = 0;",
            f"    S[{std['ingress_port']}] = port; S[{std['packet_length']}] = len;",
            "    ctl_parser(c);",
            "}",
            "/* Copy field list `fl` - 1 (0: none) from `from` to the clone `c`. */",
            "static void gf_preserve(gf_ctx *c, const gf_ctx *from, uint64_t fl) {",
            "    switch (fl) {",
            *(f"    case {index + 1}: {' '.join(f'S[{slot}] = from->s[{slot}];' for slot in slots)} break;"
              for index, slots in sorted(c.field_lists.items())),
            "    default: break;",
            "    }",
            "}",
            "/* A resubmitted (the arriving frame) or recirculated (the deparsed frame) packet's ingress:",
            " * fresh metadata, instance type `itype`, after its parser the fields of list `fl` - 1 of `from`. */",
            "static void gf_ingress_again(gf_ctx *c, const gf_ctx *from, const uint8_t *data, uint32_t len,",
            "                             uint32_t port, uint64_t now, uint64_t fl, uint64_t itype) {",
            "    memcpy(c->s, gf_template, sizeof c->s);",
            "    c->data = data; c->len = len; c->pos = 0; c->payload_off = 0; c->now_us = now; c->exit_flag = 0;",
            "    c->ndig = 0; c->fault = 0;",
            f"    S[{std['ingress_port']}] = port; S[{std['instance_type']}] = itype; S[{std['packet_length']}] = len;",
            f"    S[{std['ingress_global_timestamp']}] = now;",
            "    ctl_parser(c); gf_preserve(c, from, fl); ctl_verify(c); c->exit_flag = 0; if (!c->fault) ctl_ingress(c);",
            "}",
            "/* Egress, checksum update and deparser: the frame's length in `out`, or -1 (dropped). */",
            "static int gf_egress_run(gf_ctx *c, uint32_t port, uint64_t enq_ts, uint64_t enq_qdepth,",
            "                         uint64_t deq_td, uint64_t deq_qdepth, uint8_t *out) {",
            f"    S[{std['egress_port']}] = port; S[{std['egress_spec']}] = port;",
            f"    S[{std['enq_timestamp']}] = enq_ts & 0xFFFFFFFFu; S[{std['enq_qdepth']}] = enq_qdepth & 0x7FFFF;",
            f"    S[{std['deq_timedelta']}] = deq_td & 0xFFFFFFFFu; S[{std['deq_qdepth']}] = deq_qdepth & 0x7FFFF;",
            f"    S[{std['egress_global_timestamp']}] = (enq_ts + deq_td) & 0xFFFFFFFFFFFFULL;",
            "    c->exit_flag = 0; c->ndig = 0; S[GF_CLONE] = 0; ctl_egress(c);  /* egress's own log words, clone */",
            "    if (c->fault) return -1;",
            f"    int drop = S[{std['egress_spec']}] == GF_DROP;",
            "    if (drop && S[GF_CLONE] != 2) return -1;  /* an E2E clone is made of a dropped packet too */",
            "    ctl_compute(c);",
            "    c->out = out; c->out_len = 0; ctl_deparser(c);",
            "    uint32_t rest = c->len - c->payload_off;",
            "    if (c->out_len + rest > GF_MAXFRAME) { c->full_len = 0; return -1; }  /* dropped, never cut */",
            "    memcpy(out + c->out_len, c->data + c->payload_off, rest);",
            "    uint32_t flen = c->full_len = c->out_len + rest;",
            "    if (drop) return -1;",
            "    return (int)(S[GF_TRUNCATE] && S[GF_TRUNCATE] < flen ? S[GF_TRUNCATE] : flen);",
            "}",
            f"#define GF_STD_EGRESS_SPEC {std['egress_spec']}",
            f"#define GF_STD_MCAST_GRP {std['mcast_grp']}",
            f"#define GF_STD_PRIORITY {std['priority']}",
            f"#define GF_STD_EGRESS_RID {std['egress_rid']}",
            f"#define GF_STD_INSTANCE_TYPE {std['instance_type']}",
            f"#define GF_STD_INGRESS_PORT {std['ingress_port']}",
            '#include "gf_process.h"',
        ]
        if with_switch:
            lines.append('#include "gf_switch.h"')
        return "\n".join(lines) + "\n"


@dataclass
class GeneratedC:
    """The C file of a program and what its numbers stand for."""

    source: str
    faults: list[P4SwitchError]  # the errors fault codes stand for (`gf_process` returns -1 - code)
    log_formats: list[str]  # the text of each log_msg, by its word's offset from LOG_ID
    switch_reason: str = ""  # why the switch loops cannot run it ("": they can)


def generate_c(compiled: CompiledProgram, rec: Recorded, with_switch: bool = True) -> GeneratedC:
    """The C file for a recorded compilation (NativeUnsupported when not covered)."""
    gen = ProgramGen(compiled, rec)
    source = gen.generate(with_switch)
    return GeneratedC(source, gen.faults, gen.log_formats, gen.switch_reason)
