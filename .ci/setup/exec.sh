# The sandbox tests run commands under Landlock and under bubblewrap; both must be here.
if ! command -v bwrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
