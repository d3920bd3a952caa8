# Sourced by .ci/run. Builds llama.cpp's llama-server once (cached outside the repository;
# an interrupted build resumes) and fetches SmolLM2-135M-Instruct, then exports
# GIT_AGENT_TEST_LLAMA_SERVER and GIT_AGENT_TEST_LLAMA_MODEL for tests/suite/model/llama.rs,
# which fails without them. A failed build stops .ci/run here.
llama_exports="$(GIT_AGENT_BUILD_JOBS="${GIT_AGENT_BUILD_JOBS:-$(nproc)}" nice -n 10 .ci/llama-server.sh)"
eval "$llama_exports"
unset llama_exports
# The tests start llama-server themselves with `--jinja --chat-template-file
# tests/data/smollm2-tools.jinja`: SmolLM2's built-in template renders no tools, and this
# llama.cpp then drops `tools` from every request without a word.
