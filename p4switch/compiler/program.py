"""Compiles a parsed P4-16 v1model program into Python closures, checking types on the way.

Every expression becomes ``fn(s) -> value`` and every statement ``fn(s) -> None`` over the
packet's slot list ``s`` (slot 0 holds the PacketContext). Nothing walks the syntax tree
per packet. Type errors are raised as P4TypeError with the source location.
"""

from __future__ import annotations

from pathlib import Path

import random
from typing import Any, Callable

from lark import Token, Tree

from p4switch.compiler.blocks import BlockCompiler
from p4switch.compiler.expr import ExprCompiler
from p4switch.compiler.externs import ExternCompiler
from p4switch.compiler.loops import LoopCompiler
from p4switch.compiler.operators import OperatorCompiler
from p4switch.compiler.packet import PacketCompiler
from p4switch.compiler.parsers import ParserCompiler
from p4switch.compiler.stmt import StmtCompiler
from p4switch.compiler.tables import TableCompiler
from p4switch.compiler.compiled import (
    E, ActionImpl, Const, Place, Scope, _anno_map, _anno_string, _same_type, const,
    parse_int_literal, to_unsigned, wrapper, Fn,
)
from p4switch.externs import CounterArray, MeterArray, RegisterArray
from p4switch.frontend.errors import P4TypeError, P4UnsupportedError, SourceLocation
from p4switch.frontend.program import ControllerHeaderInfo, ParamInfo, ProgramInfo
from p4switch.frontend.types import (
    BitT, BoolT, DeclT, EnumT, ErrorT, ExternT, HeaderT, IntLitT, ListT, P4Type, StackT,
    StringT, StructT, TypeVarT, VarbitT, VoidT, default_value, scalar_width, slot_count,
)
from p4switch.tables import Table


class Compiler(ExprCompiler, OperatorCompiler, StmtCompiler, LoopCompiler, ExternCompiler, PacketCompiler,
               ParserCompiler, TableCompiler, BlockCompiler):
    """One compilation of one program; see module docstring."""

    def __init__(self, tree: Tree, locate: Callable[[int, int], SourceLocation], seed: int = 0) -> None:
        self.tree = tree
        self.locate = locate
        self.rng = random.Random(seed)
        self.types: dict[str, P4Type] = {}
        self.errors: list[str] = []
        self.match_kinds: list[str] = []
        self.globals = Scope()
        self.next_slot = 1
        self.template: list = [None]
        self.info = ProgramInfo()
        self.info.error_members = self.errors  # the same list, filled as errors are declared
        self.tables: dict[str, Table] = {}
        self.counters: dict[str, CounterArray] = {}
        self.meters: dict[str, MeterArray] = {}
        self.registers: dict[str, RegisterArray] = {}
        self.action_profiles: dict[str, Any] = {}
        self.value_sets: dict[str, Any] = {}
        self.field_lists: dict[int, list[int]] = {}
        self.decls: dict[str, Tree] = {}
        self.instances: dict[str, Tree] = {}
        self.global_actions: dict[str, Tree] = {}
        self.compiled_global_actions: dict[str, ActionImpl] = {}
        self.functions: dict[str, Tree] = {}
        self.extern_functions: set[str] = set()
        #: extern functions the program itself declares (not v1model's): name -> declaration
        self.program_extern_functions: dict[str, Tree] = {}
        self.extern_objects: set[str] = set()
        self.type_params: dict[str, P4Type] = {}
        self.compiled_functions: dict[str, Any] = {}
        self.std_place: Place | None = None  # standard_metadata, once allocated
        self.call_type_args: Any = None  # explicit type arguments of the extern call being compiled

    # ---- errors --------------------------------------------------------------------------

    def where(self, node: Any) -> SourceLocation | None:
        if isinstance(node, Token) and node.line is not None:
            return self.locate(node.line, node.column or 1)
        if isinstance(node, Tree):
            meta = node.meta
            if not meta.empty:
                return self.locate(meta.line, meta.column)
            for child in node.children:
                loc = self.where(child)
                if loc is not None:
                    return loc
        return None

    def type_error(self, node: Any, message: str) -> P4TypeError:
        return P4TypeError(message, self.where(node))

    def unsupported(self, node: Any, message: str) -> P4UnsupportedError:
        return P4UnsupportedError(message, self.where(node))

    # ---- slots ---------------------------------------------------------------------------

    def alloc(self, t: P4Type) -> Place:
        n = slot_count(t)
        base = self.next_slot
        self.next_slot += n
        self.template.extend(self._initial(t))
        return Place(t, base)

    def _initial(self, t: P4Type) -> list:
        if isinstance(t, HeaderT):
            return [False] + [v for _, ft in t.fields for v in self._initial(ft)]
        if isinstance(t, StructT):
            return [v for _, ft in t.fields for v in self._initial(ft)]
        if isinstance(t, StackT):
            return [0] + self._initial(t.elem) * t.size
        if isinstance(t, ListT):
            return [v for et in t.elems for v in self._initial(et)]
        return [default_value(t)]

    # ---- types ---------------------------------------------------------------------------

    def resolve_type(self, node: Any) -> P4Type:
        if isinstance(node, Token):
            return self._named_type(node)
        kind = node.data
        if kind == "bool_type":
            return BoolT()
        if kind == "error_type":
            return ErrorT()
        if kind == "string_type":
            return StringT()
        if kind == "int_inf_type":
            return IntLitT()
        if kind == "void_type":
            return VoidT()
        if kind == "dontcare_type":
            return TypeVarT("_")
        if kind == "bit1_type":
            return BitT(1)
        if kind in ("bit_type", "int_type", "varbit_type"):
            width = self.const_int(node.children[0])
            if width <= 0:
                raise self.type_error(node, f"width must be positive, got {width}")
            if kind == "varbit_type":
                return VarbitT(width)
            return BitT(width, kind == "int_type")
        if kind == "named_type":
            return self._named_type(node.children[0])
        if kind == "specialized_type":
            name = str(node.children[0])
            args = tuple(self.resolve_type(a) for a in node.children[1].children)
            base = self._named_type(node.children[0])
            if isinstance(base, ExternT):
                return ExternT(name, args)
            if isinstance(base, DeclT) and base.kind == "package":
                return base  # V1Switch<H, M>(...): the type arguments are inferred anyway
            raise self.unsupported(node, f"generic type {name}<...> is not supported")
        if kind == "tuple_type":
            return ListT(tuple(self.resolve_type(a) for a in node.children[0].children))
        if kind == "stack_type":
            elem = self.resolve_type(node.children[0])
            size = self.const_int(node.children[1])
            if not isinstance(elem, HeaderT | StructT):
                raise self.type_error(node, f"stack elements must be headers, not {elem}")
            return StackT(elem, size)
        raise self.unsupported(node, f"type form {kind} is not supported")

    def _named_type(self, tok: Any) -> P4Type:
        name = str(tok)
        if name in self.type_params:
            return self.type_params[name]
        t = self.types.get(name)
        if t is None:
            raise self.type_error(tok, f"unknown type {name}")
        return t

    def const_int(self, node: Any) -> int:
        if isinstance(node, Token) and node.type == "INTEGER":
            return parse_int_literal(str(node))[0]
        e = self.expr(node, self.globals)
        if not e.is_const or not isinstance(e.const, int):
            raise self.type_error(node, "expected a compile-time constant integer")
        return int(e.const)

    # ---- declarations ----------------------------------------------------------------------

    def declare(self) -> None:
        for decl in self.tree.children:
            if not isinstance(decl, Tree):
                continue
            handler = getattr(self, f"_decl_{decl.data}", None)
            if handler is None:
                raise self.unsupported(decl, f"declaration {decl.data} is not supported")
            handler(decl)

    def _decl_empty(self, node: Tree) -> None:
        pass

    def _fields(self, nodes: list) -> tuple[list[tuple[str, P4Type]], dict[str, dict]]:
        fields, annos = [], {}
        seen: set[str] = set()
        for f in nodes:
            fname = str(f.children[2].children[0])
            if fname in seen:
                raise self.type_error(f, f"duplicate field {fname}")
            seen.add(fname)
            fields.append((fname, self.resolve_type(f.children[1])))
            annos[fname] = _anno_map(f.children[0])
        return fields, annos

    def _struct_leaves(self, node: Tree, header: str, prefix: str, t: StructT) -> list[tuple[str, P4Type]]:
        """The fixed-width leaves of a struct inside a header, named `prefix.field`, in order."""
        leaves: list[tuple[str, P4Type]] = []
        for fname, ft in t.fields:
            if isinstance(ft, StructT) and not ft.is_union:
                leaves += self._struct_leaves(node, header, f"{prefix}.{fname}", ft)
            elif isinstance(ft, BitT | BoolT) or (isinstance(ft, EnumT) and ft.repr):
                leaves.append((f"{prefix}.{fname}", ft))
            else:
                raise self.type_error(node, f"header {header}: field {prefix}.{fname} has type {ft}, "
                                            "which cannot be in a header")
        return leaves

    def _decl_header_decl(self, node: Tree) -> None:
        name = str(node.children[1])
        declared, _ = self._fields(node.children[3:])
        fields: list[tuple[str, P4Type]] = []
        groups: dict[str, StructT] = {}
        for i, (fname, ft) in enumerate(declared):
            if isinstance(ft, StructT) and not ft.is_union:
                groups[fname] = ft
                fields += self._struct_leaves(node, name, fname, ft)
                continue
            if not isinstance(ft, BitT | BoolT | VarbitT) and not (isinstance(ft, EnumT) and ft.repr):
                raise self.type_error(node, f"header {name}: field {fname} has type {ft}, "
                                            "which cannot be in a header")
            if isinstance(ft, VarbitT) and i != len(declared) - 1:
                raise self.unsupported(node, f"header {name}: a varbit field must be the last field")
            fields.append((fname, ft))
        header = HeaderT(name, fields, _anno_map(node.children[0]), groups)
        self.types[name] = header
        annos = header.annotations
        ctrl = _anno_string(annos, "controller_header")
        if ctrl is not None:
            self.info.controller_headers[ctrl] = ControllerHeaderInfo(
                ctrl, name, [ParamInfo(f, scalar_width(t)) for f, t in fields])

    def _decl_struct_decl(self, node: Tree) -> None:
        name = str(node.children[1])
        fields, annos = self._fields(node.children[3:])
        self.types[name] = StructT(name, fields, False, annos)

    def _decl_union_decl(self, node: Tree) -> None:
        name = str(node.children[1])
        fields, annos = self._fields(node.children[3:])
        for fname, ft in fields:
            if not isinstance(ft, HeaderT):
                raise self.type_error(node, f"header_union {name}: member {fname} is not a header")
        self.types[name] = StructT(name, fields, True, annos)

    def _decl_enum_decl(self, node: Tree) -> None:
        name = str(node.children[1])
        members = [str(n.children[0]) for n in node.children[2:]]
        self.types[name] = EnumT(name, members)

    def _decl_ser_enum_decl(self, node: Tree) -> None:
        repr_t = self.resolve_type(node.children[1])
        name = str(node.children[2])
        if not isinstance(repr_t, BitT):
            raise self.type_error(node, f"enum {name}: underlying type must be bit<W> or int<W>")
        values = {}
        for m in node.children[3:]:
            values[str(m.children[0].children[0])] = to_unsigned(self.const_int(m.children[1]), repr_t.width)
        self.types[name] = EnumT(name, list(values), repr_t, values)

    def _decl_typedef_decl(self, node: Tree) -> None:
        target = self.resolve_type(node.children[-2])
        self.types[str(node.children[-1].children[0])] = target

    def _decl_error_decl(self, node: Tree) -> None:
        for n in node.children:
            member = str(n.children[0])
            if member not in self.errors:
                self.errors.append(member)

    def _decl_match_kind_decl(self, node: Tree) -> None:
        for n in node.children:
            self.match_kinds.append(str(n.children[0]))

    def _decl_const_decl(self, node: Tree) -> None:
        self.globals.names[str(node.children[2].children[0])] = Const(self._const_value(node, self.globals))

    def _const_value(self, node: Tree, scope: Scope) -> E:
        t = self.resolve_type(node.children[1])
        e = self.coerce(self.expr(node.children[3], scope, t), t, node)
        if not e.is_const:
            raise self.type_error(node, "constant initializer is not a compile-time constant")
        return e

    def _decl_extern_object(self, node: Tree) -> None:
        name = str(node.children[1])
        self.types[name] = ExternT(name)
        self.extern_objects.add(name)

    def _decl_extern_function(self, node: Tree) -> None:
        proto = node.children[1]
        name = str(proto.children[1].children[0])
        self.extern_functions.add(name)
        where = self.where(node)
        if where is None or Path(where.file).name not in ("core.p4", "v1model.p4"):
            self.program_extern_functions[name] = node

    def _decl_action_decl(self, node: Tree) -> None:
        self.global_actions[str(node.children[1].children[0])] = node

    def _decl_function_decl(self, node: Tree) -> None:
        self.functions[str(node.children[1].children[1].children[0])] = node

    def _decl_parser_decl(self, node: Tree) -> None:
        self.types[str(node.children[1])] = DeclT(str(node.children[1]), "parser", node)

    def _decl_control_decl(self, node: Tree) -> None:
        self.types[str(node.children[1])] = DeclT(str(node.children[1]), "control", node)

    def _decl_parser_type_decl(self, node: Tree) -> None:
        self.types[str(node.children[1])] = DeclT(str(node.children[1]), "parser_type")

    def _decl_control_type_decl(self, node: Tree) -> None:
        self.types[str(node.children[1])] = DeclT(str(node.children[1]), "control_type")

    def _decl_package_decl(self, node: Tree) -> None:
        self.types[str(node.children[1])] = DeclT(str(node.children[1]), "package", node)

    def _decl_instantiation(self, node: Tree) -> None:
        self.instances[str(node.children[3].children[0])] = node

    # ---- coercion --------------------------------------------------------------------------

    def coerce(self, e: E, target: P4Type, node: Any) -> E:
        """Implicit conversion of `e` to `target` (int literals take the target's width)."""
        src = e.type
        if _same_type(src, target) or isinstance(target, TypeVarT):
            return e
        if isinstance(src, IntLitT) and isinstance(target, BitT):
            if e.is_const:
                w = wrapper(target)
                assert w is not None
                return const(target, w(e.const))
            w2 = wrapper(target)
            fn = e.fn
            return E(target, lambda s: w2(fn(s)))
        if isinstance(src, IntLitT) and isinstance(target, IntLitT):
            return e
        if isinstance(src, ListT) and isinstance(target, HeaderT | StructT | ListT):
            return self._list_to(e, target, node)
        if isinstance(target, EnumT) and target.repr is not None and isinstance(src, IntLitT):
            return E(target, e.fn, e.const)
        raise self.type_error(node, f"expected {target}, got {src}")

    def _list_to(self, e: E, target: P4Type, node: Any) -> E:
        items: list[E] = e.extra or []
        if isinstance(target, ListT):
            elem_types = list(target.elems)
        else:
            assert isinstance(target, HeaderT | StructT)
            elem_types = [ft for _, ft in target.fields]
        if len(items) != len(elem_types):
            raise self.type_error(node, f"{len(items)} value(s) given for {target} "
                                        f"with {len(elem_types)} field(s)")
        parts: list[Fn] = []
        for item, et in zip(items, elem_types):
            c = self.coerce(item, et, node)
            parts.append(self._block_fn(c))
        head = [True] if isinstance(target, HeaderT) else []

        def build(s: list) -> list:
            out = list(head)
            for p in parts:
                out.extend(p(s))
            return out
        return E(target, build)

    def _block_fn(self, e: E) -> Fn:
        """Closure returning the slot values of `e` as a list (scalars: one item)."""
        if isinstance(e.type, HeaderT | StructT | StackT | ListT) and not (
                isinstance(e.type, ListT) and e.place is None and e.extra is not None
                and e.fn is None):
            if e.place is not None:
                return e.place.block_reader()
            assert e.fn is not None
            return e.fn
        if isinstance(e.type, ListT):
            fns = [self._block_fn(i) for i in e.extra]

            def build(s: list) -> list:
                out: list = []
                for f in fns:
                    out.extend(f(s))
                return out
            return build
        fn = e.fn
        assert fn is not None
        return lambda s: [fn(s)]


