#!/usr/bin/env bash
# Installs @dwmkerr/mock-llm (an OpenAI-compatible mock server nobody in
# this project wrote) for the interop test in model/openai. The version is
# pinned in package.json and package-lock.json; node_modules is git-ignored.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
  echo "tools/mock-llm/install.sh: npm (Node.js) is required to install mock-llm" >&2
  exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
test -f node_modules/@dwmkerr/mock-llm/dist/main.js
echo "tools/mock-llm: @dwmkerr/mock-llm $(node -p 'require("./node_modules/@dwmkerr/mock-llm/package.json").version') installed"
