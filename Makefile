# gradfabric: two commands get everything going: `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := .venv
PY          := $(VENV)/bin/python
SYSTEM_PY   := /usr/bin/python3
TOPO        ?= leafspine
TARGET      ?= embedded
# PCAP=1 captures every switch port into pcaps/; ARGS passes any other `gradfabric run` option
# through (e.g. ARGS="--policy my.yaml --log-level debug").
PCAP        ?=
ARGS        ?=
PYTEST_ARGS ?=
# The reference P4 tools (p4c, BMv2): ../shared/p4ref when it exists, unless the caller names a
# prefix of their own; otherwise whatever is on PATH (see gradfabric/p4ref.py).
ifeq ($(origin GRADFABRIC_P4REF),undefined)
  ifneq ($(wildcard ../shared/p4ref/bin/p4c),)
    export GRADFABRIC_P4REF := $(abspath ../shared/p4ref)
  endif
else
  export GRADFABRIC_P4REF
endif
# Debian packages the fabric needs: Mininet (and its Python module, imported from the venv),
# iproute2 for namespaces and veths, tcpdump for pcaps, ethtool to turn off TX checksum
# offload, iperf3 for background traffic, python3-venv to build .venv from the system Python.
DEB_PACKAGES := mininet iproute2 tcpdump ethtool iperf3 iputils-ping procps psmisc \
                python3-venv python3-dev gcc
DEB_STAMP    := $(VENV)/.debs-ok
PIP_STAMP    := $(VENV)/.installed
# p4c's STF driver (p4c-stf) runs in its own small venv: it needs ply and scapy 2.5.0 (p4c
# 1.2.4.17's pin; the project itself uses a newer scapy). gradfabric/p4stf.py finds it, unless
# P4C_STF_PYTHON names another python.
STF_VENV     := .venv-stf
STF_STAMP    := $(STF_VENV)/.installed

.PHONY: help install run test bench soak fuzz-bmv2 stop clean p4

help:
	@echo "make run     set up what is missing, then boot the default fabric (TOPO=$(TOPO) TARGET=$(TARGET) PCAP=1 ARGS=...)"
	@echo "make test    set up what is missing, then run the test suite"
	@echo "make bench   run the benchmarks (figures as ratios against a baseline of the same run)"
	@echo "make fuzz-bmv2  differential fuzzer p4switch vs BMv2 with FUZZ_PACKETS (default 3000) per program, then FUZZ_WRITES (10^5) P4Runtime writes to both over gRPC, for the router and for dlcp.p4"
	@echo "make soak    10^5 fuzzed P4Runtime RPCs, 10^6 malformed frames, 10^5 control-plane writes native vs Python (SANITIZE=1: native under ASan/UBSan)"
	@echo "make p4      compile p4src/ with the embedded front end into build/ (and p4c, from \$$GRADFABRIC_P4REF/bin or PATH, into build/bmv2/)"
	@echo "make stop    stop the fabric: every switch process, namespace and interface it made"
	@echo "make clean   stop, then remove .venv, build/, logs/, pcaps/ and caches"
	@echo "make install Debian packages and the virtual environment only"

install: $(PIP_STAMP) $(STF_STAMP)

$(STF_STAMP): $(DEB_STAMP)
	@test -x $(STF_VENV)/bin/python || $(SYSTEM_PY) -m venv $(STF_VENV) \
	  || { echo "install: could not create $(STF_VENV)" >&2; exit 1; }
	@$(STF_VENV)/bin/python -m pip install -q "ply==3.11" "scapy==2.5.0" \
	  || { echo "install: pip install ply scapy==2.5.0 into $(STF_VENV) failed" >&2; exit 1; }
	@touch $@

$(DEB_STAMP):
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "install: missing Debian packages:$$missing (run as root, or apt-get install them)" >&2; exit 1; fi; \
	  echo "install: apt-get install$$missing"; \
	  apt-get update -qq || { echo "install: apt-get update failed" >&2; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "install: apt-get install$$missing failed" >&2; exit 1; }; \
	fi
	@test -x $(SYSTEM_PY) || { echo "install: $(SYSTEM_PY) not found (Debian's python3)" >&2; exit 1; }
	@test -x $(PY) || $(SYSTEM_PY) -m venv --system-site-packages $(VENV) \
	  || { echo "install: could not create $(VENV) from $(SYSTEM_PY)" >&2; exit 1; }
	@$(PY) -c "import mininet.net" || { echo "install: the venv cannot import Debian's mininet module" >&2; exit 1; }
	@touch $@

# A new top-level package needs a new editable install, so its __init__.py is a prerequisite.
$(PIP_STAMP): $(DEB_STAMP) pyproject.toml $(wildcard */__init__.py)
	@echo "install: pip install -e .[dev,train] into $(VENV)"
	@$(PY) -m pip install -q --upgrade "pip>=24" || { echo "install: pip upgrade failed" >&2; exit 1; }
	@$(PY) -m pip install -q -e '.[dev,train]' || { echo "install: pip install -e .[dev,train] failed" >&2; exit 1; }
	@touch $@

run: install
	@$(VENV)/bin/gradfabric run --topo $(TOPO) --target $(TARGET) $(if $(filter 1 yes true,$(PCAP)),--pcap) $(ARGS)

# The packet simulation's optional extra (ns-3), which the tests need: once, then a stamp.
NS3_STAMP    := $(VENV)/.ns3-ok
$(NS3_STAMP): $(PIP_STAMP)
	@$(PY) -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('ns3') is None)" \
	  || $(PY) -m pip install -q -e '.[ns3]' || { echo "install: pip install -e .[ns3] failed" >&2; exit 1; }
	@touch $@

test: install $(NS3_STAMP)
	@$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	@$(PY) -m tests.benchmarks $(BENCH)

FUZZ_PACKETS ?= 3000
FUZZ_WRITES ?= 100000
fuzz-bmv2: install
	@GRADFABRIC_FUZZ_PACKETS=$(FUZZ_PACKETS) $(PY) -m pytest -s -p no:cacheprovider tests/test_bmv2_fuzz.py
	@$(PY) -m tests.p4runtime_differential_bmv2 --writes $(FUZZ_WRITES)
	@$(PY) -m tests.p4runtime_differential_bmv2 --program p4src/dlcp.p4 --writes $(FUZZ_WRITES)

# SANITIZE=1: the native runtime built with AddressSanitizer and UBSan (its own cache entry),
# libasan preloaded into Python; the native tests, then the control-plane differential and the
# native malformed-frame soak run under it.
SANITIZE ?=
SANITIZE_ENV = P4SWITCH_NATIVE_SANITIZE=1 ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LD_PRELOAD="$$($${CC:-cc} -print-file-name=libasan.so) $$($${CC:-cc} -print-file-name=libubsan.so)"
soak: install
ifneq ($(filter 1 yes true,$(SANITIZE)),)
	@$(SANITIZE_ENV) $(PY) -m pytest -q -p no:cacheprovider tests/test_native_index.py \
	  tests/test_native_control_plane.py tests/test_native_pipeline.py tests/test_native_selectors.py \
	  tests/test_native_fuzz.py tests/test_native_switch.py tests/test_native_frames.py \
	  tests/test_native_signed.py tests/test_native_wide.py tests/test_native_subparser.py \
	  tests/test_native_loops.py tests/test_native_features.py tests/test_native_language.py
	@$(SANITIZE_ENV) $(PY) -m tests.benchmarks.soak_p4runtime --rpcs 0 --frames 0 $(SOAK_ARGS)
else
	@$(PY) -m tests.benchmarks.soak_p4runtime $(SOAK_ARGS)
endif

p4: install
	@$(VENV)/bin/gradfabric compile

stop:
	@if [ -x $(VENV)/bin/gradfabric ]; then $(VENV)/bin/gradfabric stop; else echo "stop: nothing installed, nothing running"; fi

clean: stop
	rm -rf $(VENV) $(STF_VENV) build logs pcaps .pytest_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
