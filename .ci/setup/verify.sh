# Test runners the verification tests drive for real: pytest (the Python fixture), node (the
# JavaScript fixture, node's own test runner). cargo is already here.
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest
command -v node >/dev/null || { echo "node is required by the verification tests" >&2; exit 1; }
