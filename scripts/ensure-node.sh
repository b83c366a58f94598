# Source this file (bash): puts Node.js >= 22.13 first on PATH. Where the machine's Node is
# older, it installs Node 22 from the npm registry (the `node` package) into a cache folder
# once and uses that. Hardhat 3 and Vitest 5 need Node 22; npm must also run under it, or
# it silently skips Hardhat's native binding.
BILLPAY_NODE_VERSION="${BILLPAY_NODE_VERSION:-22.23.3}"

billpay_node_ok() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=13)?0:1)'
}

if ! billpay_node_ok; then
  billpay_node_dir="${BILLPAY_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/billpay-node/$BILLPAY_NODE_VERSION}"
  if [ ! -x "$billpay_node_dir/node_modules/.bin/node" ]; then
    echo "ensure-node: installing Node $BILLPAY_NODE_VERSION into $billpay_node_dir" >&2
    mkdir -p "$billpay_node_dir"
    # The node package's preinstall fetches the platform's binary: approved by name, as npm
    # asks (it warns of any install script not approved), in the cache folder's own package.json.
    echo '{"private":true,"allowScripts":{"node":true}}' > "$billpay_node_dir/package.json"
    npm install --no-save --no-audit --no-fund --prefix "$billpay_node_dir" "node@$BILLPAY_NODE_VERSION" >&2
  fi
  export PATH="$billpay_node_dir/node_modules/.bin:$PATH"
  billpay_node_ok || { echo "ensure-node: could not provide Node >= 22.13" >&2; return 1 2>/dev/null || exit 1; }
fi
