#!/usr/bin/env bash
# Rein's peer comparison, on demand (not in CI): build every peer once, then
# run every workload against every peer alternately, R rounds, a fresh
# process each time, and print the Markdown report (docs/performance.md,
# "Peers"). Arguments go to the driver (main.go), e.g.
#
#   bench/peers/run.sh                       # 3 rounds, default sizes
#   bench/peers/run.sh -rounds 1 -scale 0.1  # a quick look
#   bench/peers/run.sh -cases instant,tool_stream -peers eino,rein-engine
#
# Needs Go (the Go module proxy) and Node >= 20 with npm (the npm registry).
set -euo pipefail
cd "$(dirname "$0")"

# The harness is one file, copied byte for byte into every Go peer.
for p in eino adk rein; do
	if ! cmp -s harness/harness.go "$p/harness/harness.go"; then
		echo "run.sh: $p/harness/harness.go differs from harness/harness.go (copy it: cp harness/harness.go $p/harness/)" >&2
		exit 1
	fi
done

mkdir -p bin
for p in eino adk; do
	echo "build $p" >&2
	(cd "$p" && go build -o ../bin/"$p" .)
done
# The Rein peer builds the working tree (replace => ../../..): when the main
# module's requirements change, -mod=mod brings its go.sum along.
echo "build rein" >&2
(cd rein && go build -mod=mod -o ../bin/rein .)
echo "build driver" >&2
go build -o bin/peers .
if [ ! -d langgraph/node_modules ]; then
	echo "npm ci (langgraph)" >&2
	(cd langgraph && npm ci --no-audit --no-fund --loglevel=error)
fi

exec bin/peers -bin bin "$@"
