# fednode - build, test, bench and install.
# `make` builds fednode (and libfedcuda.so when nvcc is found; with MPI when
# mpicc is found); `make test`
# runs every unit and integration test; `make asan` the unit tests under
# ASan + UBSan; `make demo` installs what is missing and runs the main job.
# Layout conventions this file relies on (so a new module needs no edit here):
#   <module>/*.c            library code, into build/libfednode.a (no CLI)
#   app/fednode.c, app/fedsim.c    the programs' main()s
#   app/*.c                 the subcommands and the CLI helpers both programs
#                           share, into build/libfedapp.a: linked into the
#                           programs and into the tests named in CLI_TESTS only
#   tests/test_*.c          one cmocka binary per module, run by `make test`
#   tests/test_*.sh         process tests, run by `make test` after the binaries
#   tests/support/*.c       helpers linked into every test binary (support.h)
#   tests/long_*.{c,sh}     `make test-long`
#   tests/fuzz/fuzz_*.c     libFuzzer targets (`make fuzz`); in `make test` each
#                           replays its tracked corpus, tests/fuzz/corpus/NAME,
#                           through tests/fuzz/replay.c
#   bench/bench_*.c         `make bench`; bench/bench_*.sh run after them

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
ifeq ($(origin CC),default)
CC      := cc
endif
BUILD   ?= build
V       ?= 0
Q       := $(if $(filter 1,$(V)),,@)

BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

WARN    := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Werror
OPT     ?= -O2
CFLAGS  ?=
override CFLAGS += -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -I. $(BLAS_CFLAGS) -MMD -MP -pthread
# libpng and libjpeg(-turbo): the image-folder reader (model/data_img.c)
IMG_LIBS := -lpng16 -ljpeg
# protobuf-c: ONNX files (onnx/), onnx.proto compiled by protoc-c at build time
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
PROTOC_C   ?= protoc-c
LDLIBS  := $(BLAS_LIBS) -lsodium -lnng -lsqlite3 -linih $(IMG_LIBS) -lprotobuf-c -lz -lcmocka -ldl -lm -pthread
CORE_LDLIBS := $(BLAS_LIBS) -linih $(IMG_LIBS) -lz -ldl -lm -pthread

# ---- MPI: mpicc (Open MPI) on PATH. mpi/mpi_*.c include mpi.h: built
# (with mpicc's flags, into libfednode.a, libmpi linked into everything) when
# mpicc is found; mpi/none.c stands in for them otherwise. `make MPICC=`
# builds without (asan, tsan and fuzz do). HAVE_MPI is 1 or empty;
# $(BUILD)/have_mpi holds 1 or 0 for the process tests.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
HAVE_MPI   := $(if $(MPICC),1)
MPI_CFLAGS := $(if $(HAVE_MPI),$(shell $(MPICC) --showme:compile 2>/dev/null))
MPI_LIBS   := $(if $(HAVE_MPI),$(shell $(MPICC) --showme:link 2>/dev/null))
MPI_SRCS   := $(if $(HAVE_MPI),$(wildcard mpi/mpi_*.c),mpi/none.c)
LDLIBS     += $(MPI_LIBS)

MODULES   := core model onnx crypto secagg gossip storage node sim privacy mpi
PROG_SRCS := app/fednode.c app/fedsim.c
LIB_SRCS  := $(filter-out $(wildcard mpi/mpi_*.c) mpi/none.c,$(wildcard $(addsuffix /*.c,$(MODULES)))) \
             $(MPI_SRCS)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/gen/onnx.pb-c.o
LIB       := $(BUILD)/libfednode.a
APP_SRCS  := $(filter-out $(PROG_SRCS),$(wildcard app/*.c))
APP_OBJS  := $(APP_SRCS:%.c=$(BUILD)/%.o)
APPLIB    := $(BUILD)/libfedapp.a
# the tests that exercise subcommands and link the CLI (no other test does)
CLI_TESTS := test_crypto test_store test_train_record test_fedsim test_http test_privacy
PROGS     := $(foreach p,$(PROG_SRCS),$(if $(wildcard $(p)),$(notdir $(p:.c=))))
MAN_PAGES := $(PROGS:%=$(BUILD)/man/%.1)

TEST_SRCS  := $(wildcard tests/test_*.c)
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_SH    := $(wildcard tests/test_*.sh)
LONG_SRCS  := $(wildcard tests/long_*.c)
LONG_BINS  := $(LONG_SRCS:tests/%.c=$(BUILD)/tests/%)
LONG_SH    := $(wildcard tests/long_*.sh)
BENCH_SRCS := $(wildcard bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
BENCH_SH   := $(wildcard bench/bench_*.sh)
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES := $(FUZZ_SRCS:tests/fuzz/%.c=%)
REPLAY_BINS:= $(FUZZ_NAMES:%=$(BUILD)/tests/replay_%)
TESTLIB_SRCS := $(wildcard tests/support/*.c)
TESTLIB_OBJS := $(TESTLIB_SRCS:%.c=$(BUILD)/%.o)

# ---- CUDA: nvcc on PATH, then /usr/local/cuda/bin ----
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRCS := $(wildcard cuda/*.cu)
CUDA_PLUGIN := $(if $(and $(NVCC),$(CUDA_SRCS)),$(BUILD)/libfedcuda.so)

.PHONY: all test test-unit test-long asan tsan bench fuzz fuzz-seeds demo deps install clean \
        docs-figures check-tools gpu-bundle

all: check-tools $(PROGS) $(CUDA_PLUGIN) $(MAN_PAGES)

check-tools:
	@printf 'fednode build: cc %s, nvcc %s, mpicc %s\n' "$$($(CC) -dumpversion 2>/dev/null)" \
	  "$(if $(NVCC),✓ $(NVCC),✗ (CUDA plugin skipped))" \
	  "$(if $(HAVE_MPI),✓ $(MPICC),✗ (MPI sites skipped; make deps installs Open MPI))"

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) $(OBJ_CFLAGS) -c $< -o $@

# ONNX's schema as Debian's libonnx-dev ships it, compiled by protoc-c into
# $(BUILD)/gen (never into the tree); onnx/ includes the generated header.
$(BUILD)/gen/onnx.pb-c.c $(BUILD)/gen/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(BUILD)/gen
	@command -v $(PROTOC_C) >/dev/null || { echo "protoc-c not found: make deps installs protobuf-c-compiler (and libonnx-dev: $(ONNX_PROTO))" >&2; exit 1; }
	@echo "  PROTO $<"
	$(Q)cp $< $(BUILD)/gen/onnx.proto && cd $(BUILD)/gen && $(PROTOC_C) --c_out=. onnx.proto
$(BUILD)/gen/onnx.pb-c.o: $(BUILD)/gen/onnx.pb-c.c
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -I$(BUILD)/gen -c $< -o $@
$(BUILD)/onnx/%.o: OBJ_CFLAGS = -I$(BUILD)/gen
$(BUILD)/tests/test_onnx.o $(BUILD)/tests/test_onnx_nodes.o: OBJ_CFLAGS = -I$(BUILD)/gen
$(patsubst %.c,$(BUILD)/%.o,$(wildcard onnx/*.c)) $(BUILD)/tests/test_onnx.o \
  $(BUILD)/tests/test_onnx_nodes.o: | $(BUILD)/gen/onnx.pb-c.h

# The plugin's folder, PREFIX/lib/fednode, is compiled into the programs
# (model/backend.c), so `make install PREFIX=/opt/x` installs it where the
# installed fednode looks. $(BUILD)/prefix holds the PREFIX backend.o was
# built for: a different one rebuilds it.
PREFIX_STAMP := $(BUILD)/prefix
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(PREFIX_STAMP) 2>/dev/null)" = '$(PREFIX)' ] || \
  printf '%s\n' '$(PREFIX)' >$(PREFIX_STAMP); })
endif
$(BUILD)/model/backend.o: $(PREFIX_STAMP)
$(BUILD)/model/backend.o: OBJ_CFLAGS = -DFED_PREFIX='"$(PREFIX)"'
# the bf16 GEMM alone is built for AVX512-BF16 and AMX; the CPU backend checks
# the CPU (cpuid) before it calls it
$(BUILD)/model/gemm_bf16.o: OBJ_CFLAGS = -mavx512f -mavx512bf16 -mamx-tile -mamx-bf16

# whether this build has MPI (for the process tests); a change remakes $(LIB)
MPI_STAMP := $(BUILD)/have_mpi
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(MPI_STAMP) 2>/dev/null)" = '$(if $(HAVE_MPI),1,0)' ] || \
  echo '$(if $(HAVE_MPI),1,0)' >$(MPI_STAMP); })
endif
$(BUILD)/mpi/mpi_%.o: OBJ_CFLAGS = $(MPI_CFLAGS)

$(LIB): $(LIB_OBJS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $(filter %.o,$^)

$(APPLIB): $(APP_OBJS)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

fednode: $(BUILD)/app/fednode.o $(APPLIB) $(LIB)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -rdynamic

fedsim: $(BUILD)/app/fedsim.o $(APPLIB) $(LIB)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TESTLIB_OBJS) $(APPLIB) $(LIB)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $(filter %.o,$^) $(if $(filter $(CLI_TESTS),$(notdir $@)),$(APPLIB)) \
	  $(LIB) -o $@ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/replay_%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay.o $(APPLIB) $(LIB)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# ---- tests ----
test: all $(TEST_BINS) $(REPLAY_BINS)
	$(Q)BUILD=$(BUILD) sh tests/run.sh $(TEST_BINS) $(REPLAY_BINS) $(TEST_SH)

test-long: all $(LONG_BINS)
	$(Q)BUILD=$(BUILD) LONG=1 sh tests/run.sh $(LONG_BINS) $(LONG_SH)

# ASan + UBSan with clang over the unit tests (process tests stay in `make test`).
asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan CC=clang OPT=-O1 MPICC= \
	  CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  build-asan/libfednode.a $(TEST_BINS:$(BUILD)/%=build-asan/%) $(REPLAY_BINS:$(BUILD)/%=build-asan/%)
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  BUILD=build-asan FEDNODE_ASAN=1 sh tests/run.sh $(TEST_BINS:$(BUILD)/%=build-asan/%) \
	  $(REPLAY_BINS:$(BUILD)/%=build-asan/%)

tsan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-tsan CC=clang OPT=-O1 MPICC= \
	  CFLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
	  $(TEST_BINS:$(BUILD)/%=build-tsan/%)
	$(Q)BUILD=build-tsan sh tests/run.sh $(TEST_BINS:$(BUILD)/%=build-tsan/%)

bench: all $(BENCH_BINS)
	$(Q)for b in $(BENCH_BINS); do echo "== $$b"; $$b || exit 1; done
	$(Q)for s in $(BENCH_SH); do echo "== $$s"; sh $$s || exit 1; done

# libFuzzer targets: clang -fsanitize=fuzzer,address; FUZZ_SECONDS each.
# Each starts from the tracked tests/fuzz/corpus/NAME and writes what it finds
# to build-fuzz/corpus/NAME, never to the tracked folder `make test` replays
# (so a clean clone tests what this one does). To keep new inputs, merge them
# in and commit: build-fuzz/bin/NAME -merge=1 tests/fuzz/corpus/NAME build-fuzz/corpus/NAME
FUZZ_SECONDS ?= 60
fuzz:
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 MPICC= \
	  CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" build-fuzz/libfednode.a build-fuzz/libfedapp.a
	$(Q)mkdir -p build-fuzz/bin
	$(Q)for n in $(FUZZ_NAMES); do \
	  clang -std=c11 -O1 -g -D_GNU_SOURCE -I. $(BLAS_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    tests/fuzz/$$n.c build-fuzz/libfedapp.a build-fuzz/libfednode.a -o build-fuzz/bin/$$n $(LDLIBS) || exit 1; \
	  mkdir -p build-fuzz/corpus/$$n; \
	  echo "== fuzz $$n for $(FUZZ_SECONDS)s"; \
	  build-fuzz/bin/$$n -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    build-fuzz/corpus/$$n $$(test -d tests/fuzz/corpus/$$n && echo tests/fuzz/corpus/$$n) || exit 1; \
	done

# The seeds tests/fuzz/fuzz_frame.c writes (valid frames of every type in
# the table of gossip/wire.h, each checked to open): rerun after a wire
# change and commit the new tests/fuzz/corpus/fuzz_frame/v<N>-* files.
fuzz-seeds: $(LIB)
	$(Q)$(CC) $(CFLAGS) -DFUZZ_FRAME_GEN tests/fuzz/fuzz_frame.c $(LIB) -o $(BUILD)/fuzz_frame_gen \
	  $(LDLIBS)
	$(Q)$(BUILD)/fuzz_frame_gen tests/fuzz/corpus/fuzz_frame

# ---- CUDA plugin ----
# sm_75, sm_80 (and 86/89) and sm_90 code, plus compute_90 PTX for newer GPUs
# to JIT. The plugin links cudart (static, nvcc's default) and cuBLAS only,
# with an rpath to the toolkit that built it.
NVCC_FLAGS ?= -O2 -std=c++17 -Xcompiler -fPIC,-Wall,-Wextra -I. -Wno-deprecated-gpu-targets \
  -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_75,code=sm_75 -gencode arch=compute_90,code=compute_90
$(BUILD)/cuda/%.o: cuda/%.cu model/backend.h core/err.h core/log.h $(wildcard cuda/*.h)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/libfedcuda.so: $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
	@echo "  LD    $@"
	$(Q)$(NVCC) -shared $^ -o $@ -lcublas -Xlinker -rpath,$(CUDA_HOME)/lib64

# The CUDA test and bench link core/ and model/ objects only (no libsodium,
# NNG or SQLite: they must build on the GPU machine from gpu-bundle/), with
# -rdynamic so the plugin finds the program's fed_log and allocator.
CUDA_HOST_OBJS := $(filter $(BUILD)/core/%.o $(BUILD)/model/%.o,$(LIB_OBJS))
$(BUILD)/tests/test_cuda: $(BUILD)/tests/test_cuda.o $(CUDA_HOST_OBJS)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(CORE_LDLIBS) -lcmocka -rdynamic

$(BUILD)/bench/bench_cuda: $(BUILD)/bench/bench_cuda.o $(CUDA_HOST_OBJS)
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(CORE_LDLIBS) -rdynamic

# Debian packages and Fashion-MNIST for a GPU machine without network
# (scripts/gpu-run.sh there builds and runs test_cuda and bench_cuda).
gpu-bundle:
	$(Q)sh scripts/gpu-bundle.sh gpu-bundle

# ---- man pages: docs/man/PROG.1.in with its option sections written by
# `PROG --help-man` from the tables --help prints, so they never drift ----
MAN_DATE  := $(shell git log -1 --format=%cs 2>/dev/null || date +%F)
$(BUILD)/man/%.1: docs/man/%.1.in %
	@mkdir -p $(dir $@)
	@echo "  MAN   $@"
	$(Q)FEDNODE_NO_REEXEC=1 ./$* --help-man >$@.opts
	$(Q)sed -e 's/@DATE@/$(MAN_DATE)/' -e '/^@OPTIONS@$$/r $@.opts' -e '/^@OPTIONS@$$/d' \
	  $< >$@.tmp && mv $@.tmp $@ && rm -f $@.opts

# ---- install, deps, demo ----
# The systemd unit's ExecStart names /usr/local/bin/fednode: installed with
# this PREFIX's bin instead.
MANDIR          ?= $(PREFIX)/share/man
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
# The safetensors reader exported models load with where Debian has no
# safetensors package (docs/model-formats.md: PYTHONPATH=PYDIR).
PYDIR           ?= $(PREFIX)/share/fednode/python
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/fednode \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(SYSTEMD_UNITDIR) $(DESTDIR)$(PYDIR)/safetensors
	install -m 0755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	$(if $(CUDA_PLUGIN),install -m 0755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/fednode/)
	install -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 tests/support/py/safetensors/__init__.py $(DESTDIR)$(PYDIR)/safetensors/
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' examples/systemd/fednode@.service \
	  >$(DESTDIR)$(SYSTEMD_UNITDIR)/fednode@.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_UNITDIR)/fednode@.service

deps:
	$(Q)sh scripts/deps.sh

demo:
	$(Q)sh scripts/deps.sh demo
	$(Q)$(MAKE) --no-print-directory all
	$(Q)sh scripts/demo.sh

# The figures README.md and docs/*.md quote, rerun here (scripts/docs-figures.sh;
# `make docs-figures FIGURES=long` adds make test-long and make bench).
docs-figures: all
	$(Q)sh scripts/docs-figures.sh $(FIGURES)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz fednode fedsim

.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
