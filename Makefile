# llmmini: one GNU Makefile. `make`, `make test`, `make demo`, `make install PREFIX=...`,
# `make test SANITIZE=address,undefined`. See README.md.

VERSION_MAJOR := 0
VERSION_MINOR := 1
VERSION_PATCH := 0
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

CC ?= cc
PREFIX ?= /usr/local
LLMM_SHARED ?= ../shared
export LLMM_SHARED

comma := ,
CC_IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -c clang)
# clang's ASan/UBSan objects in a folder of their own (its UBSan has checks gcc's lacks; clang
# names the host x86_64-pc-linux-gnu, which the cross check below would take for a target)
ifneq ($(SANITIZE),)
ifeq ($(filter thread,$(subst $(comma), ,$(SANITIZE))),)
ifneq ($(CC_IS_CLANG),0)
BUILD ?= build/sanitize-clang
endif
endif
endif
# A cross compiler builds into its own folder, so native and target objects never mix.
TARGET_TRIPLE := $(shell $(CC) -dumpmachine 2>/dev/null)
HOST_TRIPLE := $(shell cc -dumpmachine 2>/dev/null)
ifneq ($(TARGET_TRIPLE),$(HOST_TRIPLE))
BUILD ?= build/$(TARGET_TRIPLE)
endif

# ThreadSanitizer cannot share objects with the other sanitizers: its own folder
ifneq ($(filter thread,$(subst $(comma), ,$(SANITIZE))),)
BUILD ?= build/tsan
endif
ifneq ($(SANITIZE),)
BUILD ?= build/sanitize
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD ?= build
SAN_FLAGS :=
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -fPIC -fvisibility=hidden -pthread \
              -Iinclude -Ilib -Icpu -MMD -MP $(SAN_FLAGS) $(CFLAGS)
ALL_LDFLAGS := -pthread $(SAN_FLAGS) $(LDFLAGS)
LIBS := -lzstd -lm

LIB_SRC := $(wildcard lib/*/*.c) $(wildcard cpu/*.c cpu/*/*.c cpu/*/*/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
STATIC_LIB := $(BUILD)/libllmmini.a
SONAME := libllmmini.so.$(VERSION_MAJOR)
SHARED := $(BUILD)/$(SONAME)

EXAMPLES := $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/llmmini-*.c))
# tools/: programs that need the library's internals (lib/*.h) and link the static archive:
# the model converter and the synthetic-model generator. Examples see include/ alone.
TOOLS := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/llmmini-*.c))
# Test suites: tests/test_*.c, one program each ($(BUILD)/tests/test_X); the CUDA backend's are
# in tests/cuda/ (below). tests/support/*.c is linked into every suite, and every test object
# finds its headers as "support/NAME.h" (tests/README.md).
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_SUPPORT := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT:%.c=$(BUILD)/obj/%.o)
$(BUILD)/obj/tests/%.o: ALL_CFLAGS += -Itests
DEPS_OK := $(BUILD)/.deps-ok

.PHONY: all lib examples tools test test-arm demo bench fuzz install clean deps
all: lib examples tools

deps: $(DEPS_OK)
$(DEPS_OK): scripts/deps.sh
	@sh scripts/deps.sh
	@mkdir -p $(@D) && touch $@

lib: $(STATIC_LIB) $(SHARED) $(BUILD)/libllmmini.so
examples: $(EXAMPLES)
tools: $(TOOLS)

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# x86 SIMD kernels (cpu/arch/x86/, one file per kernel table): only these files get target flags,
# so the rest of the library stays baseline x86-64 and the kernels run only after the cpuid
# check (cpu/kernel_table.c). On other targets the files compile to nothing. -ffp-contract=off:
# no fused multiply-add unless written, since the kernels must round exactly as the scalar
# reference does.
X86_OBJ := $(BUILD)/obj/cpu/arch/x86
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
SIMD_AVX2_FLAGS := -mavx2 -mfma -mf16c -ffp-contract=off
SIMD_AVX512_FLAGS := $(SIMD_AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512vnni
$(X86_OBJ)/avx2.o: ALL_CFLAGS += $(SIMD_AVX2_FLAGS)
$(X86_OBJ)/avxvnni.o: ALL_CFLAGS += $(SIMD_AVX2_FLAGS) -mavxvnni
# the EVEX copy of the AVX-VNNI table keeps to AVX2's 16 vector registers, so that it spills
# (and is timed) as the VEX code on a CPU with AVX-VNNI would (GCC only: clang lacks the flag)
ifeq ($(CC_IS_CLANG),0)
AVX2_REGISTERS_ONLY := $(foreach r,$(shell seq 16 31),-ffixed-xmm$(r))
endif
$(X86_OBJ)/avxvnni_evex.o: ALL_CFLAGS += $(SIMD_AVX512_FLAGS) $(AVX2_REGISTERS_ONLY)
$(X86_OBJ)/avx512.o: ALL_CFLAGS += $(SIMD_AVX512_FLAGS) -mamx-tile -mamx-int8
$(X86_OBJ)/delta_avx2.o: ALL_CFLAGS += $(SIMD_AVX2_FLAGS)
$(X86_OBJ)/delta_avx512.o: ALL_CFLAGS += $(SIMD_AVX512_FLAGS)
$(X86_OBJ)/conv_avx2.o: ALL_CFLAGS += $(SIMD_AVX2_FLAGS)
$(X86_OBJ)/conv_avx512.o: ALL_CFLAGS += $(SIMD_AVX512_FLAGS)
endif

# aarch64 NEON kernels (cpu/arch/arm/): Advanced SIMD is baseline, so neon.c needs no target
# flag; only dotprod.c gets ARMv8.2's SDOT, and runs only after the hwcap check
# (cpu/kernel_table.c). -ffp-contract=off as for x86 (already implied by -std=c11, said here
# because the bit-exact F32 matmul and axpy depend on it).
ARM_OBJ := $(BUILD)/obj/cpu/arch/arm
ifneq ($(filter aarch64%,$(shell $(CC) -dumpmachine)),)
$(ARM_OBJ)/neon.o: ALL_CFLAGS += -ffp-contract=off
$(ARM_OBJ)/dotprod.o: ALL_CFLAGS += -march=armv8.2-a+dotprod -ffp-contract=off
$(ARM_OBJ)/delta_neon.o: ALL_CFLAGS += -ffp-contract=off
$(ARM_OBJ)/conv_neon.o: ALL_CFLAGS += -ffp-contract=off
endif

$(STATIC_LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ) lib/llmmini.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/llmmini.map $(ALL_LDFLAGS) \
	    -o $@ $(LIB_OBJ) $(LIBS)

$(BUILD)/libllmmini.so: $(SHARED)
	ln -sf $(SONAME) $@

$(EXAMPLES): $(BUILD)/%: $(BUILD)/obj/examples/%.o $(STATIC_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIBS)
$(TOOLS): $(BUILD)/%: $(BUILD)/obj/tools/%.o $(STATIC_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIBS)
# examples compile without the internal include paths, as an application does
$(BUILD)/obj/examples/%.o: ALL_CFLAGS := $(filter-out -Ilib -Icpu,$(ALL_CFLAGS))

# Example programs shaped like apps (examples/*.c other than the llmmini-* tools), built into
# $(BUILD)/examples/ against the public header alone (no -Ilib/-Icpu: they cannot reach the
# internals) and run by tests/test_examples.sh in `make test`. docs/embedding.md.
APP_EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(filter-out examples/llmmini-%.c,$(wildcard examples/*.c)))
APP_EXAMPLE_OBJ := $(APP_EXAMPLES:$(BUILD)/examples/%=$(BUILD)/obj/examples/app/%.o)
$(APP_EXAMPLE_OBJ): $(BUILD)/obj/examples/app/%.o: examples/%.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(filter-out -Ilib -Icpu,$(ALL_CFLAGS)) -c $< -o $@
$(APP_EXAMPLES): $(BUILD)/examples/%: $(BUILD)/obj/examples/app/%.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIBS)
examples: $(APP_EXAMPLES)
# run-tests.sh runs a *.sh suite with sh; it finds the examples from its own folder
EXAMPLES_TEST := $(BUILD)/tests/test_examples.sh
$(EXAMPLES_TEST): tests/test_examples.sh
	@mkdir -p $(@D)
	cp $< $@
TEST_BIN += $(EXAMPLES_TEST)
-include $(wildcard $(BUILD)/obj/examples/app/*.d)

# tests/X.c, and the C suites of tests/cuda/ (CUDA_C_TESTS below), into $(BUILD)/tests/X
LINK_TEST = $(CC) $(ALL_LDFLAGS) -o $@ $< $(TEST_EXTRA_OBJ) $(TEST_SUPPORT_OBJ) $(STATIC_LIB) -lcmocka $(LIBS)
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(LINK_TEST)

# tests/test_fuzz_replay.c links every fuzz harness, each with its entry points renamed
FUZZ_REPLAY_OBJ := $(BUILD)/obj/tests/fuzz/gguf_replay.o $(BUILD)/obj/tests/fuzz/tokenize_replay.o \
    $(BUILD)/obj/tests/fuzz/chat_parse_replay.o $(BUILD)/obj/tests/fuzz/grammar_replay.o \
    $(BUILD)/obj/tests/fuzz/json_schema_replay.o $(BUILD)/obj/tests/fuzz/saved_state_replay.o \
    $(BUILD)/obj/tests/fuzz/adapter_replay.o $(BUILD)/obj/tests/fuzz/chat_replay.o
$(BUILD)/obj/tests/fuzz/%_replay.o: tests/fuzz/%.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DLLVMFuzzerTestOneInput=fuzz_$*_input -DLLVMFuzzerInitialize=fuzz_$*_init -c $< -o $@
$(BUILD)/tests/test_fuzz_replay: TEST_EXTRA_OBJ := $(FUZZ_REPLAY_OBJ)
$(BUILD)/tests/test_fuzz_replay: $(FUZZ_REPLAY_OBJ)

# scripts/run-tests.sh runs the suites TEST_JOBS at a time (default: the online CPUs), the slowest
# (natively and under qemu, as its summary reports them) first.
TEST_FIRST := test_cuda_module test_recurrent test_simd_kernels test_grammar_generate test_api_model \
    test_fidelity test_chat_tools test_cuda_sample test_cuda_ops
export TEST_FIRST
test: all $(TEST_BIN)
	@TEST_RUNNER="$(TEST_RUNNER)" sh scripts/run-tests.sh $(TEST_RUN)

# ThreadSanitizer: `make tsan` builds and runs, in build/tsan, the suites that run threads: the
# thread contract under load (test_concurrency), the thread pool (test_threadpool), the kernels
# and packed copies on the pool's threads (test_simd_kernels) and generation with 2-thread
# contexts and two threads repacking one model (test_generate), and the sequence API's model-based
# random test on six threads over one model and its adapters (test_api_model). `make test
# SANITIZE=thread` builds everything with TSan but runs only these: the SIMT emulation switches
# stacks behind TSan's back (tests/simt/simt_switch.h), so the CUDA emulation suites cannot run
# under it, and the single-threaded suites have nothing to race. A race fails the suite (TSan's
# exit code 66); scripts/tsan.supp lists the suppressions, each with why it is a false positive.
TSAN_TESTS := $(addprefix $(BUILD)/tests/,test_concurrency test_threadpool test_simd_kernels test_generate test_api_model)
ifneq ($(filter thread,$(subst $(comma), ,$(SANITIZE))),)
TEST_RUN := $(TSAN_TESTS)
export TSAN_OPTIONS ?= suppressions=$(CURDIR)/scripts/tsan.supp halt_on_error=1 second_deadlock_stack=1
else
TEST_RUN = $(TEST_BIN) $(TEST_SCRIPTS)
endif
# The sequence API's model-based random test (tests/test_api_model.c) at length: SOAK_OPS operations
# per run under ASan and UBSan, a new seed each time (printed; LLMM_TEST_SEED replays one). Hours
# of CPU at the default (docs/security.md has a measured run); not in `make test` (which runs a
# few thousand) or CI. CC=clang builds it in build/sanitize-clang.
SOAK_OPS ?= 1000000
.PHONY: soak soak-run
soak:
	$(MAKE) SANITIZE=address,undefined soak-run
soak-run: $(BUILD)/tests/test_api_model
	LLMM_TEST_OPS=$(SOAK_OPS) $<
.PHONY: tsan tsan-run
tsan:
	@DEPS_TARGET=tsan sh scripts/deps.sh
	$(MAKE) SANITIZE=thread tsan-run
tsan-run: $(TSAN_TESTS)
	@sh scripts/run-tests.sh $(TSAN_TESTS)

# Valgrind's memcheck over the suites that allocate the most: generation, the KV cache, the
# tokenizers and the sequence API's allocation-failure pass (test_api_model, 200 operations a run
# under memcheck: about 100 s) (the normal build; memcheck needs no instrumented objects). Any error or any leak
# (definite, indirect or possible) fails the suite. cmocka runs the tests in its own process
# (no fork), so memcheck sees them all. Under valgrind the CPU reports no AVX-512, so the AVX2
# kernels run. VALGRIND_TESTS picks a subset (.ci/run does).
VALGRIND_TESTS ?= $(addprefix $(BUILD)/tests/,test_generate test_kvcache test_tokenizer_spm test_tokenizer_bpe test_api_model)
VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
            --errors-for-leak-kinds=definite,indirect,possible --fair-sched=yes
.PHONY: valgrind
valgrind: $(VALGRIND_TESTS)
	@DEPS_TARGET=valgrind sh scripts/deps.sh
	@LLMM_TEST_OPS=200 TEST_RUNNER="$(VALGRIND)" sh scripts/run-tests.sh $(VALGRIND_TESTS)

# The aarch64 build's tests under user-mode emulation (Jetson Orin, phones). Debian:
# gcc-aarch64-linux-gnu, qemu-user and the arm64 cmocka/zstd packages, installed by
# scripts/deps.sh when root. The guest's loader and libc come from the multiarch root (/):
# the arm64 cmocka/zstd packages pull in libc6:arm64 there, and pairing its libc with the
# cross toolchain's older ld.so (/usr/aarch64-linux-gnu) hangs every pthread_create.
ARM_CC ?= aarch64-linux-gnu-gcc
ARM_SYSROOT ?= /
test-arm:
	@DEPS_TARGET=aarch64 sh scripts/deps.sh
	$(MAKE) CC=$(ARM_CC) TEST_RUNNER="qemu-aarch64 -L $(ARM_SYSROOT)" test

# SIMT emulation (tests/simt/)
# The test-only header that runs CUDA kernels on the CPU (simt.h) and its own tests, built by
# the C++ compiler matching $(CC) (aarch64-linux-gnu-gcc -> aarch64-linux-gnu-g++ for test-arm)
# unless CXX is given. `make CUDA=1` also compiles its sample kernels with nvcc, which keeps the
# emulated API a subset of CUDA's.
ifeq ($(origin CXX),default)
ifneq ($(filter %gcc,$(CC)),)
CXX := $(patsubst %gcc,%g++,$(CC))
else ifneq ($(filter %clang,$(CC)),)
CXX := $(patsubst %clang,%clang++,$(CC))
else
CXX := g++
endif
endif
SIMT_CXXFLAGS := -std=c++17 -O1 -g -Wall -Wextra -Werror -Itests/simt -Iinclude -Ilib -MMD -MP \
                 -pthread $(SAN_FLAGS)
SIMT_TEST := $(BUILD)/tests/test_simt
TEST_BIN += $(SIMT_TEST)
$(BUILD)/obj/tests/simt/%.o: tests/simt/%.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) -c $< -o $@
$(SIMT_TEST): $(BUILD)/obj/tests/simt/test_simt.o
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) -o $@ $< -lcmocka
test: $(SIMT_TEST)
# Memory-transaction counters (tests/simt/simt_profile.h): kernels compiled by clang with its
# load/store callbacks (-fsanitize-coverage=trace-loads,trace-stores, clang 14 or later) and
# SIMT_PROFILE, linked with simt_profile.cpp (not instrumented), which counts sectors, requests
# and bank conflicts. Its test is part of make test where clang++ targets the machine the tests
# run on (not under test-arm's cross compiler, nor the sanitizer builds, which it would bypass).
PROFILE_CXX ?= clang++
PROFILE_FLAGS := -DSIMT_PROFILE -fsanitize-coverage=func,trace-loads,trace-stores -fno-vectorize \
                 -fno-slp-vectorize -Wno-missing-field-initializers
PROFILE_CXXFLAGS := $(filter-out $(SAN_FLAGS),$(SIMT_CXXFLAGS))
$(BUILD)/obj/profile/simt_profile.o: tests/simt/simt_profile.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(PROFILE_CXX) $(PROFILE_CXXFLAGS) -DSIMT_PROFILE -Wno-missing-field-initializers -fPIC -c $< -o $@
$(BUILD)/obj/profile/tests/%.o: tests/simt/%.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(PROFILE_CXX) $(PROFILE_CXXFLAGS) $(PROFILE_FLAGS) -c $< -o $@
SIMT_PROFILE_TEST := $(BUILD)/tests/test_simt_profile
$(SIMT_PROFILE_TEST): $(BUILD)/obj/profile/tests/test_simt_profile.o $(BUILD)/obj/profile/simt_profile.o
	@mkdir -p $(@D)
	$(PROFILE_CXX) $(PROFILE_CXXFLAGS) -o $@ $^ -ldl -lcmocka
ifeq ($(SAN_FLAGS)$(filter aarch64% arm%,$(CC)),)
ifneq ($(shell command -v $(PROFILE_CXX)),)
TEST_BIN += $(SIMT_PROFILE_TEST)
test: $(SIMT_PROFILE_TEST)
endif
endif
-include $(wildcard $(BUILD)/obj/profile/*.d $(BUILD)/obj/profile/*/*.d)
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
# Jetson Orin (sm_87), H100/H200 (sm_90), and PTX for later GPUs
NVCC_ARCH := -gencode arch=compute_87,code=sm_87 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
# nvcc compiles host code with $(CXX), so that CC=aarch64-linux-gnu-gcc cross-builds the module
# for Jetson; the CUDA libraries of the target (a cross toolkit keeps aarch64's under
# targets/aarch64-linux/lib: docs/embedding.md)
# -fmad=false: nvcc contracts a * b + c into an FMA by default, which the emulated build (and the
# CPU, -ffp-contract=off) never does; a kernel that wants one writes __fmaf_rn (cuda/README.md,
# "Numerics")
NVCC := $(CUDA_HOME)/bin/nvcc -ccbin $(CXX) -fmad=false
CUDA_LIB ?= $(CUDA_HOME)/lib64
SIMT_NVCC_OBJ := $(BUILD)/obj/tests/simt/sample_kernels.o
$(SIMT_NVCC_OBJ): tests/simt/sample_kernels.cu tests/simt/sample_kernels.cuh $(wildcard tests/simt/simt*.h) \
        cuda/portable.h
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 $(NVCC_ARCH) -Itests/simt -Icuda -c $< -o $@
all: $(SIMT_NVCC_OBJ)
endif
-include $(wildcard $(BUILD)/obj/tests/simt/*.d)

# CUDA backend (cuda/)
# Every cuda/*.cu compiles twice (cuda/portable.h): by nvcc for the GPU (make CUDA=1), which
# needs nothing of tests/, and by the host C++ compiler against the SIMT emulation
# (tests/simt/simt.h) for make test: SIMT_RUNTIME hands portable.h the emulation, so only these
# test-only compile lines name it. The emulated objects are test-only; tests/cuda/test_*.cpp
# check them against the CPU backend's references (each names the emulated objects it needs:
# `$(BUILD)/tests/test_cuda_X: $(BUILD)/obj/cuda-emu/X.o`).
CUDA_SRC := $(wildcard cuda/*.cu)
SIMT_RUNTIME := -Itests/simt -DLLMM_SIMT_HEADER='"simt.h"'
CUDA_EMU_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Werror -fPIC -ffp-contract=off -Icuda $(SIMT_RUNTIME) \
                     -Iinclude -Ilib -Icpu -MMD -MP -pthread $(SAN_FLAGS)
$(BUILD)/obj/cuda-emu/%.o: cuda/%.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(CUDA_EMU_CXXFLAGS) -x c++ -c $< -o $@
$(BUILD)/obj/tests/cuda/%.o: tests/cuda/%.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(CUDA_EMU_CXXFLAGS) -Itests -c $< -o $@
# The C suites of the CUDA backend, tests/cuda/test_*.c: the block math of cuda/quant_blocks.cuh
# as C (test_cuda_blocks), the emulated module (test_cuda_module) and the emulated static archive
# (test_cuda_static), each linked as the suites of tests/ are, into $(BUILD)/tests/ (where
# test_cuda_module finds the module, ../libllmmini-cuda-emu.so).
CUDA_C_TESTS := $(patsubst tests/cuda/%.c,$(BUILD)/tests/%,$(wildcard tests/cuda/test_*.c))
$(BUILD)/obj/tests/cuda/%.o: ALL_CFLAGS += -Icuda
$(CUDA_C_TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/cuda/%.o $(TEST_SUPPORT_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(LINK_TEST)
TEST_BIN += $(CUDA_C_TESTS)
test: $(CUDA_C_TESTS)
CUDA_EMU_TESTS := $(patsubst tests/cuda/%.cpp,$(BUILD)/tests/%,$(wildcard tests/cuda/test_*.cpp))
$(CUDA_EMU_TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/cuda/%.o $(TEST_SUPPORT_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CXX) $(CUDA_EMU_CXXFLAGS) -o $@ $< $(filter $(BUILD)/obj/cuda-emu/%.o,$^) $(TEST_SUPPORT_OBJ) $(STATIC_LIB) \
	    -lcmocka $(LIBS)
TEST_BIN += $(CUDA_EMU_TESTS)
test: $(CUDA_EMU_TESTS)
ifeq ($(CUDA),1)
CUDA_OBJ := $(CUDA_SRC:cuda/%.cu=$(BUILD)/obj/cuda/%.o)
$(BUILD)/obj/cuda/%.o: cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 $(NVCC_ARCH) -Xcompiler -fPIC -MMD -MP -Icuda -Iinclude -Ilib -c $< -o $@
all: $(CUDA_OBJ)
endif
-include $(wildcard $(BUILD)/obj/cuda-emu/*.d) $(wildcard $(BUILD)/obj/tests/cuda/*.d) $(wildcard $(BUILD)/obj/cuda/*.d)
$(BUILD)/tests/test_cuda_ops: $(BUILD)/obj/cuda-emu/norm_rope_act.o $(BUILD)/obj/cuda-emu/attention.o $(BUILD)/obj/cuda-emu/graph.o
$(BUILD)/tests/test_cuda_matmul: $(BUILD)/obj/cuda-emu/gemv_quant.o
$(BUILD)/tests/test_cuda_sample: $(BUILD)/obj/cuda-emu/sample.o
$(BUILD)/tests/test_cuda_prefill_attention: $(BUILD)/obj/cuda-emu/prefill_attention.o $(BUILD)/obj/cuda-emu/attention.o
$(BUILD)/tests/test_cuda_gemm: $(BUILD)/obj/cuda-emu/gemm.o
$(BUILD)/tests/test_cuda_gemm_int8: $(BUILD)/obj/cuda-emu/gemm_int8.o $(BUILD)/obj/cuda-emu/gemv_quant.o
$(BUILD)/tests/test_cuda_delta_net: $(BUILD)/obj/cuda-emu/delta_net.o

# CUDA module (cuda/backend.cu)
# The backend table and its entry point (lib/backend/backend_module.h) with every kernel file, as the
# module the core dlopens: exporting the entry point alone (cuda/module.map) and linking nothing
# of the core (-z defs: every symbol it uses is its own or the C/C++ runtime's, cudart's).
#  - libllmmini-cuda-emu.so (make test, make cuda-emu): the emulated objects, test-only;
#    tests/cuda/test_cuda_module.c loads it as LLMM_CUDA_MODULE (and `LLMM_CUDA_MODULE=
#    build/libllmmini-cuda-emu.so build/llmmini-run --backend cuda ...` runs the CLI on it).
#    -z nodelete: the emulation installs a signal handler and thread-locals, so it stays mapped.
#    Its map (tests/simt/module-emu.map) also exports the emulated runtime's counters for tests.
#  - libllmmini-cuda.so and libllmmini-cuda.a (make CUDA=1): the nvcc objects with cudart.
#    -z nodelete: cudart and cuBLASLt do not unload cleanly, so a process that created and freed
#    AUTO contexts on a machine without a device loaded and unloaded them each time, growing
#    (44 MB over 1,000 contexts, test_lifecycle) and slow (Python suite 88 s instead of 3.5 s);
#    the first load now stays, and later ones only count.
CUDA_MODULE_EMU := $(BUILD)/libllmmini-cuda-emu.so
CUDA_EMU_OBJ := $(CUDA_SRC:cuda/%.cu=$(BUILD)/obj/cuda-emu/%.o)
# -z defs, except that clang leaves a sanitized module's runtime symbols to the executable
EMU_MODULE_DEFS := $(if $(and $(SAN_FLAGS),$(filter-out 0,$(CC_IS_CLANG))),,-Wl$(comma)-z$(comma)defs)
$(CUDA_MODULE_EMU): $(CUDA_EMU_OBJ) tests/simt/module-emu.map
	$(CXX) -shared -Wl,--version-script=tests/simt/module-emu.map $(EMU_MODULE_DEFS) -Wl,-z,nodelete -pthread $(SAN_FLAGS) \
	    $(LDFLAGS) -o $@ $(CUDA_EMU_OBJ)
.PHONY: cuda-emu
cuda-emu: $(CUDA_MODULE_EMU)
# The profiled module (make cuda-profile): the emulated module with the memory-transaction
# counters (tests/simt/simt_profile.h), every symbol exported so that the counters' kernel
# addresses resolve to names (scripts/cuda-profile.py reads them with nm).
CUDA_MODULE_PROF := $(BUILD)/libllmmini-cuda-prof.so
CUDA_PROF_OBJ := $(CUDA_SRC:cuda/%.cu=$(BUILD)/obj/cuda-prof/%.o)
$(BUILD)/obj/cuda-prof/%.o: cuda/%.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(PROFILE_CXX) $(filter-out $(SAN_FLAGS),$(CUDA_EMU_CXXFLAGS)) $(PROFILE_FLAGS) -x c++ -c $< -o $@
$(CUDA_MODULE_PROF): $(CUDA_PROF_OBJ) $(BUILD)/obj/profile/simt_profile.o
	$(PROFILE_CXX) -shared -Wl,-z,defs -Wl,-z,nodelete -pthread $(LDFLAGS) -o $@ $^ -ldl
-include $(wildcard $(BUILD)/obj/cuda-prof/*.d)
# make cuda-profile: counters of a decode step and a 512-token prompt of the Qwen2.5-0.5B and
# Llama-3.2-1B shapes on the profiled module, registers and shared memory from ptxas -v (nvcc
# for sm_90 and sm_87, no GPU needed), and the roofline estimate (scripts/cuda-profile.py,
# docs/performance.md "CUDA roofline estimate"); writes $(BUILD)/cuda-profile.json. Not in make
# test: a few minutes of emulation.
$(BUILD)/tests/profile_step: $(BUILD)/obj/tests/cuda/profile_step.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIBS) -ldl
.PHONY: cuda-profile cuda-profile-check-sampling
cuda-profile: $(CUDA_MODULE_PROF) $(BUILD)/tests/profile_step $(BUILD)/llmmini-synth $(BUILD)/llmmini-quantize
	python3 scripts/cuda-profile.py --build $(BUILD)
# the block sampling the large steps use, against whole emulation on small shapes (minutes)
cuda-profile-check-sampling: $(CUDA_MODULE_PROF) $(BUILD)/tests/profile_step $(BUILD)/llmmini-synth
	python3 scripts/cuda-profile.py --build $(BUILD) --check-sampling
$(BUILD)/tests/test_cuda_module: $(CUDA_MODULE_EMU) $(BUILD)/llmmini-synth
test: $(CUDA_MODULE_EMU)
# The static archives (libllmmini-cuda-emu.a here, libllmmini-cuda.a below) add
# llmm_cuda_register (cuda/register.c), which calls into the core: a static app links the
# archive with libllmmini.a. tests/cuda/test_cuda_static.c links the emulated one that way.
CUDA_REGISTER_OBJ := $(BUILD)/obj/cuda/register.o
$(CUDA_REGISTER_OBJ): cuda/register.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@
CUDA_MODULE_EMU_STATIC := $(BUILD)/libllmmini-cuda-emu.a
$(CUDA_MODULE_EMU_STATIC): $(CUDA_EMU_OBJ) $(CUDA_REGISTER_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/tests/test_cuda_static: TEST_EXTRA_OBJ := $(CUDA_MODULE_EMU_STATIC)
$(BUILD)/tests/test_cuda_static: LIBS += -lstdc++
$(BUILD)/tests/test_cuda_static: $(CUDA_MODULE_EMU_STATIC)
ifeq ($(CUDA),1)
CUDA_MODULE := $(BUILD)/libllmmini-cuda.so
CUDA_MODULE_STATIC := $(BUILD)/libllmmini-cuda.a
$(CUDA_MODULE): $(CUDA_OBJ) cuda/module.map
	$(CXX) -shared -Wl,--version-script=cuda/module.map -Wl,-z,defs -Wl,-z,nodelete -pthread $(LDFLAGS) -o $@ \
	    $(CUDA_OBJ) -L$(CUDA_LIB) -lcublasLt -lcudart
$(CUDA_MODULE_STATIC): $(CUDA_OBJ) $(CUDA_REGISTER_OBJ)
	@rm -f $@
	ar rcs $@ $^
all: $(CUDA_MODULE) $(CUDA_MODULE_STATIC)
.PHONY: install-cuda
install: install-cuda
install-cuda: $(CUDA_MODULE) $(CUDA_MODULE_STATIC)
	install -d $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(CUDA_MODULE) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(CUDA_MODULE_STATIC) $(DESTDIR)$(PREFIX)/lib/

# Kernel tests on a GPU (make CUDA=1 cuda-device-tests; `make CUDA=1` builds them too, so that
# they keep compiling where no GPU is): each tests/cuda/test_*.cpp compiled by nvcc as CUDA
# (-x cu, where simt.h is cuda/portable.h's real runtime) and linked with the nvcc kernels of
# libllmmini-cuda.a (an archive: a test pulls in only the kernel files it calls), as
# $(BUILD)/tests/device/test_cuda_X. The tests reach device memory only through cudaMalloc and
# cudaMemcpy, which the emulation maps to host memory, so one source serves both builds.
# scripts/gpu-check.sh runs them, and again under compute-sanitizer.
CUDA_DEVICE_TESTS := $(patsubst tests/cuda/%.cpp,$(BUILD)/tests/device/%,$(wildcard tests/cuda/test_*.cpp))
$(BUILD)/obj/tests/cuda-device/%.o: tests/cuda/%.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 $(NVCC_ARCH) -x cu -Xcompiler -Wall,-Wextra,-Werror -MMD -MP -Icuda -Itests/simt \
	    -Iinclude -Ilib -Icpu -Itests -c $< -o $@
$(CUDA_DEVICE_TESTS): $(BUILD)/tests/device/%: $(BUILD)/obj/tests/cuda-device/%.o $(CUDA_MODULE_STATIC) \
        $(TEST_SUPPORT_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CXX) -pthread $(LDFLAGS) -o $@ $< $(CUDA_MODULE_STATIC) $(TEST_SUPPORT_OBJ) $(STATIC_LIB) -lcmocka $(LIBS) \
	    -L$(CUDA_LIB) -lcublasLt -lcudart -Wl,-rpath,$(CUDA_LIB)
# The static link an app makes (include/llmmini-cuda.h), with the real archive:
# built here so that the documented link line keeps linking; run on a GPU by gpu-check.sh.
# cuBLASLt (gemm.cu) links statically where the toolkit ships libcublasLt_static.a (JetPack,
# the full toolkit; it needs culibos); where it does not (this machine's toolkit has only
# libcublasLt.so) it stays the one shared CUDA library, found at run time through the rpath.
ifneq ($(wildcard $(CUDA_LIB)/libcublasLt_static.a),)
CUBLASLT_STATIC_LIBS := -lcublasLt_static -lculibos
else
CUBLASLT_STATIC_LIBS := -lcublasLt -Wl,-rpath,$(CUDA_LIB)
endif
CUDA_STATIC_TEST := $(BUILD)/tests/device/test_cuda_static
$(CUDA_STATIC_TEST): $(BUILD)/obj/tests/cuda/test_cuda_static.o $(CUDA_MODULE_STATIC) $(TEST_SUPPORT_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(CUDA_MODULE_STATIC) $(STATIC_LIB) -lcmocka \
	    -L$(CUDA_LIB) $(CUBLASLT_STATIC_LIBS) -lcudart_static -lstdc++ $(LIBS) -ldl -lrt
CUDA_DEVICE_TESTS += $(CUDA_STATIC_TEST)
.PHONY: cuda-device-tests
cuda-device-tests: $(CUDA_DEVICE_TESTS)
all: $(CUDA_DEVICE_TESTS)
-include $(wildcard $(BUILD)/obj/tests/cuda-device/*.d)
# make CUDA=1 STATIC=1: a static CUDA example, $(BUILD)/static/llmmini-run: libllmmini.a,
# libllmmini-cuda.a and cudart_static, the backend registered (llmm_cuda_register) instead of
# loaded, so it runs where neither libllmmini nor libcudart is installed (Jetson images, app
# bundles). cuBLASLt as for the static test above: static where the toolkit ships
# libcublasLt_static.a, else the one shared CUDA library (this machine's toolkit). docs/embedding.md.
ifeq ($(STATIC),1)
STATIC_EXAMPLE := $(BUILD)/static/llmmini-run
$(BUILD)/obj/static/llmmini-run.o: examples/llmmini-run.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DLLMM_REGISTER_CUDA -c $< -o $@
$(STATIC_EXAMPLE): $(BUILD)/obj/static/llmmini-run.o $(CUDA_MODULE_STATIC) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(CUDA_MODULE_STATIC) $(STATIC_LIB) -L$(CUDA_LIB) \
	    $(CUBLASLT_STATIC_LIBS) -lcudart_static -lstdc++ $(LIBS) -ldl -lrt
all: $(STATIC_EXAMPLE)
-include $(wildcard $(BUILD)/obj/static/*.d)
endif
endif

DEMO_MODEL := $(LLMM_SHARED)/models/stories260K.gguf
demo: all
	@if [ ! -f "$(DEMO_MODEL)" ]; then \
	    echo "demo: no model at $(DEMO_MODEL). Set LLMM_SHARED to the folder holding models/stories260K.gguf,"; \
	    echo "      or run build/llmmini-run -m YOUR_MODEL.gguf -p 'Hello' with any llama-family GGUF model."; \
	    echo "      (small GGUF models: the TinyStories stories260K/15M conversions, TinyLlama, SmolLM)."; exit 1; fi
	$(BUILD)/llmmini-tokenize -m $(DEMO_MODEL) --info -p "Once upon a time"
	$(BUILD)/llmmini-run -m $(DEMO_MODEL) -p "Once upon a time" -n 200 --seed 42

# Synthetic models at realistic shapes are generated into build/bench/ (not shipped).
# `make bench` runs the standard set (scripts/bench.sh) and rewrites the generated table of
# docs/performance.md; BENCH_QUICK=1 is a fast check that leaves the document alone. It is
# never part of `make test`: it takes minutes and its figures depend on the machine.
BENCH_DIR := $(BUILD)/bench
$(BENCH_DIR)/synth-%.gguf: $(BUILD)/llmmini-synth
	@mkdir -p $(@D)
	$(BUILD)/llmmini-synth -o $@ --preset $(word 1,$(subst -, ,$*)) --type $(word 2,$(subst -, ,$*))

bench: all
	BUILD=$(BUILD) sh scripts/bench.sh

# Fuzzing with libFuzzer (tests/fuzz/: one harness per entry point that takes untrusted input).
# Needs clang and its libFuzzer runtime, which `make test` does not (scripts/deps.sh installs
# them when root): the library is rebuilt in build/fuzz by clang with ASan, UBSan and coverage,
# and each harness runs FUZZ_SECONDS from seeds in $(LLMM_SHARED); crashing inputs land in
# build/fuzz/findings/. Not part of `make test` or CI (test_fuzz_replay replays them there).
FUZZ_BUILD := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
    -fno-omit-frame-pointer
fuzz:
	@DEPS_TARGET=fuzz CC=clang sh scripts/deps.sh
	$(MAKE) lib BUILD=$(FUZZ_BUILD) CC=clang SANITIZE=address,undefined CFLAGS="-O1 -g -fsanitize=fuzzer-no-link"
	@mkdir -p $(FUZZ_BUILD)/findings $(FUZZ_BUILD)/corpus/gguf $(FUZZ_BUILD)/corpus/tokenize $(FUZZ_BUILD)/seeds \
	    $(FUZZ_BUILD)/corpus/chat_parse
	@# tokenize seeds: each vocabulary's test inputs behind its index byte (tests/fuzz/tokenize.c's
	@# list order) and a flags byte (add + parse special), and the committed short texts
	i=0; for v in llama-spm llama-bpe qwen2 gpt-2 falcon deepseek-llm starcoder; do \
	    printf "\\$$(printf %03o $$i)\\003" > $(FUZZ_BUILD)/seeds/$$v; \
	    cat $(LLMM_SHARED)/vocab/ggml-vocab-$$v.gguf.inp >> $(FUZZ_BUILD)/seeds/$$v; i=$$((i + 1)); \
	done
	for h in gguf tokenize chat_parse grammar json_schema saved_state adapter chat; do \
	    clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -Iinclude tests/fuzz/$$h.c $(FUZZ_BUILD)/libllmmini.a $(LIBS) \
	        -pthread -o $(FUZZ_BUILD)/fuzz_$$h || exit 1; \
	done
	$(FUZZ_BUILD)/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=2000000 -timeout=30 \
	    -artifact_prefix=$(FUZZ_BUILD)/findings/gguf- $(FUZZ_BUILD)/corpus/gguf $(LLMM_SHARED)/models \
	    tests/fuzz/corpus/gguf
	$(FUZZ_BUILD)/fuzz_tokenize -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=30 \
	    -artifact_prefix=$(FUZZ_BUILD)/findings/tokenize- $(FUZZ_BUILD)/corpus/tokenize $(FUZZ_BUILD)/seeds \
	    tests/fuzz/corpus/tokenize
	@# chat_parse, grammar and json_schema: the committed seeds (tests/fuzz/corpus/, also replayed by
	@# make test) and dictionaries
	for h in chat_parse grammar json_schema; do mkdir -p $(FUZZ_BUILD)/corpus/$$h; \
	    $(FUZZ_BUILD)/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=30 -dict=tests/fuzz/$$h.dict \
	        -artifact_prefix=$(FUZZ_BUILD)/findings/$$h- $(FUZZ_BUILD)/corpus/$$h tests/fuzz/corpus/$$h || exit 1; \
	done
	@# saved states, adapters (also seeded by the shared adapter files) and chat messages: each grows
	@# its corpus in build/fuzz/corpus/NAME from the committed one, with its dictionary
	for h in saved_state adapter chat; do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$h; \
	    extra=; [ $$h = adapter ] && extra=$(LLMM_SHARED)/lora; \
	    $(FUZZ_BUILD)/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=30 -dict=tests/fuzz/$$h.dict \
	        -artifact_prefix=$(FUZZ_BUILD)/findings/$$h- $(FUZZ_BUILD)/corpus/$$h tests/fuzz/corpus/$$h $$extra || exit 1; \
	done

# llmmini.pc names PREFIX, so it depends on a stamp holding the PREFIX it was made for: the stamp
# is rewritten (and the .pc with it) whenever make runs with another PREFIX
PC_PREFIX_STAMP := $(BUILD)/.pc-prefix
$(PC_PREFIX_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(PREFIX)' | cmp -s - $@ || echo '$(PREFIX)' > $@
.PHONY: FORCE
$(BUILD)/llmmini.pc: pkgconfig/llmmini.pc.in Makefile $(PC_PREFIX_STAMP)
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@DL_LIBS@|$(DL_LIBS)|g' $< > $@

install: all $(BUILD)/llmmini.pc
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/llmmini.h include/llmmini-cuda.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libllmmini.so
	install -m 644 $(BUILD)/llmmini.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

# backend modules
# The core loads accelerator backends at run time (lib/backend/backend_module.c) and links -ldl only
# where dlopen is not in libc (glibc before 2.34; Debian 12's 2.36 has it there). $(LIBS)
# carries it to every static-archive link line (examples, tests) and to llmmini.pc.
DL_LIBS := $(shell printf '\043include <dlfcn.h>\nint main(void) { return dlopen(0, 0) != 0; }\n' | \
    $(CC) -x c - -o /dev/null 2>/dev/null || echo -ldl)
LIBS += $(DL_LIBS)

# Test modules for tests/test_backend_module.c (tests/module/test_module.c): the handle backend
# posing as a CUDA module, and one variant per refusal the loader makes. Each carries the core
# objects it needs from $(STATIC_LIB) and exports its entry point alone (test_module.map).
TEST_MODULE_VARIANTS := good bad-version no-entry no-device null no-types
TEST_MODULE_DEFS_bad-version := -DTEST_MODULE_BAD_VERSION
TEST_MODULE_DEFS_no-entry := -DTEST_MODULE_NO_ENTRY
TEST_MODULE_DEFS_no-device := -DTEST_MODULE_NO_DEVICE
TEST_MODULE_DEFS_null := -DTEST_MODULE_NULL
TEST_MODULE_DEFS_no-types := -DTEST_MODULE_NO_TYPES
test_module_so = $(BUILD)/tests/libllmmini-test-module$(if $(filter good,$1),,-$1).so
TEST_MODULES := $(foreach v,$(TEST_MODULE_VARIANTS),$(call test_module_so,$v))
TEST_MODULE_OBJ := $(TEST_MODULE_VARIANTS:%=$(BUILD)/obj/tests/module/test_module-%.o)
$(TEST_MODULE_OBJ): $(BUILD)/obj/tests/module/test_module-%.o: tests/module/test_module.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(TEST_MODULE_DEFS_$*) -c $< -o $@
define TEST_MODULE_RULE
$(call test_module_so,$1): $(BUILD)/obj/tests/module/test_module-$1.o $(BUILD)/obj/tests/support/handle_backend.o \
        $(STATIC_LIB) \
        tests/module/test_module.map
	@mkdir -p $$(@D)
	$$(CC) -shared -Wl,--version-script=tests/module/test_module.map $$(ALL_LDFLAGS) -o $$@ $$(filter %.o,$$^) \
	    $$(STATIC_LIB) $$(LIBS)
endef
$(foreach v,$(TEST_MODULE_VARIANTS),$(eval $(call TEST_MODULE_RULE,$v)))
$(BUILD)/tests/test_backend_module: $(TEST_MODULES)
test: $(TEST_MODULES)
-include $(wildcard $(BUILD)/obj/tests/module/*.d)

# Suites that are scripts, run by scripts/run-tests.sh after the test binaries: make install into
# two prefixes in turn (tests/install_check.sh) and the Python package's unittest suite
# (tests/python/run.sh, with the system python3). They find the build through LLMM_BUILD.
TEST_SCRIPTS := tests/install_check.sh tests/python/run.sh tests/python/wheel_check.sh
test: export LLMM_BUILD := $(BUILD)
test: export LLMM_CC := $(CC)
# make python-wheel: the Python package as a wheel carrying libllmmini.so (and, with CUDA=1, the
# CUDA module), built offline with Debian's python3-setuptools and python3-wheel (installed by
# scripts/deps.sh when root), into build/python/. tests/python/wheel_check.sh, in make test,
# builds one the same way, installs it into a fresh venv and generates through it.
PYTHON_WHEEL_DIR := $(BUILD)/python
.PHONY: python-wheel
python-wheel: $(SHARED) $(if $(filter 1,$(CUDA)),$(CUDA_MODULE))
	@DEPS_TARGET=python-wheel sh scripts/deps.sh
	@rm -f $(PYTHON_WHEEL_DIR)/llmmini-*.whl
	sh scripts/python-wheel.sh $(PYTHON_WHEEL_DIR) $(SHARED) $(if $(filter 1,$(CUDA)),$(CUDA_MODULE))

# ABI baseline (docs/abi.md): abi/llmmini.abi is the ABI of libllmmini.so as abidw dumps it
# (Debian: abigail-tools, installed by scripts/deps.sh when root). make abi-check fails on any
# difference, make abi-update rewrites the baseline for an intended change. Needs -g (default).
ABI_BASELINE := abi/llmmini.abi
.PHONY: abi-check abi-update
abi-check abi-update: $(SHARED)
	@DEPS_TARGET=abi sh scripts/deps.sh
	@sh scripts/abi.sh $(@:abi-%=%) $(SHARED) $(ABI_BASELINE)

# A client built against release 0.1.0's header alone (tests/abi/0.1.0, no include/) and run
# against the current shared library, found next to it through the rpath.
ABI_CLIENT := $(BUILD)/tests/abi_client_0_1_0
$(BUILD)/obj/tests/abi/client_0_1_0.o: tests/abi/client_0_1_0.c tests/abi/0.1.0/llmmini.h | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -Itests/abi/0.1.0 $(SAN_FLAGS) $(CFLAGS) -c $< -o $@
$(ABI_CLIENT): $(BUILD)/obj/tests/abi/client_0_1_0.o $(SHARED)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(SHARED) -Wl,-rpath,'$$ORIGIN/..'
TEST_BIN += $(ABI_CLIENT)
test: $(ABI_CLIENT)

# Symbol hygiene (docs/abi.md): tests/check-symbols.sh on this build's archives, through a
# wrapper that names them and the nm matching $(CC); run by scripts/run-tests.sh as a script.
SYMBOL_NM := $(if $(filter %-gcc,$(CC)),$(patsubst %-gcc,%-nm,$(CC)),nm)
SYMBOL_CHECK := $(BUILD)/tests/check-symbols.sh
$(SYMBOL_CHECK): tests/check-symbols.sh Makefile
	@mkdir -p $(@D)
	printf '#!/bin/sh\nexec sh tests/check-symbols.sh "%s" "%s"\n' "$(SYMBOL_NM)" "$(BUILD)" > $@
	chmod +x $@
TEST_BIN += $(SYMBOL_CHECK)
test: $(SYMBOL_CHECK)

# The house plan (docs/architecture.md): tests/check-layers.sh on the sources and this build's
# library objects (through the nm matching $(CC)), after its self-test shows it catches faults.
LAYER_CHECK := $(BUILD)/tests/check-layers.sh
$(LAYER_CHECK): tests/check-layers.sh Makefile $(STATIC_LIB)
	@mkdir -p $(@D)
	printf '#!/bin/sh\nsh tests/check-layers.sh --self-test && exec sh tests/check-layers.sh "%s" "%s"\n' \
	    "$(SYMBOL_NM)" "$(BUILD)" > $@
	chmod +x $@
TEST_BIN += $(LAYER_CHECK)
test: $(LAYER_CHECK)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_SUPPORT_OBJ:.o=.d) $(wildcard $(BUILD)/obj/examples/*.d) $(wildcard $(BUILD)/obj/tools/*.d) \
         $(wildcard $(BUILD)/obj/tests/*.d)
