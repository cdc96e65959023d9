"""The compiler: a checked P4-16 syntax tree (from ``p4switch.frontend``) becomes an executable program.

``program.Compiler`` drives the stages, one module each: expressions (``expr``, ``operators``),
statements (``stmt``, ``loops``), packet extraction and emission (``packet``), parsers
(``parsers``), tables and actions (``tables``, ``support``), controls and blocks (``blocks``),
externs (``externs``). Its output, ``compiled.CompiledProgram``, is what both executable
pipelines run: the Python reference (``p4switch.pipeline``) and the native C back end
(``p4switch.native``), which generates C from the same compiled objects.
"""
