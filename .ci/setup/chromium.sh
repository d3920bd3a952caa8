# Set-up for the status page's browser test (sourced by .ci/run under `set -euo pipefail`).
#
# Installs Debian's Chromium if missing and exports GIT_AGENT_TEST_CHROMIUM with its path;
# the test fails loudly without it.

if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
export GIT_AGENT_TEST_CHROMIUM="$(command -v chromium)"
