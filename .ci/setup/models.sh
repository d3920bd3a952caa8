# Sourced by .ci/run. Builds llama.cpp's llama-server once (cached outside the repository)
# and fetches SmolLM2-135M-Instruct, then exports GIT_AGENT_TEST_LLAMA_SERVER and
# GIT_AGENT_TEST_LLAMA_MODEL for tests/suite/model/llama.rs, which fails without them.
eval "$(nice -n 15 .ci/llama-server.sh)"
