#!/usr/bin/env bash
# Today's `RetryLayer` against the one issue 9 measured its goals on (b8d51a5), with
# tower's retry and the floor of `benches/common/floor.rs`, interleaved in rounds in
# fresh processes, as `cargo bench --bench overhead -- ratios` measures.
#
#   bash benches/baseline/run.sh             # 25 processes, pinned to core 1 if taskset exists
#   BASELINE_MODE=instructions bash benches/baseline/run.sh   # callgrind counts instead
set -euo pipefail
cd "$(dirname "$0")/../.."
old=target/baseline/b8d51a5
if [ ! -f "$old/Cargo.toml" ]; then
  mkdir -p "$old"
  git archive b8d51a5 | tar -x -C "$old"
  # Two crates of one name and version cannot share a build: the old one is renamed.
  sed -i 's/^name = "backstop"$/name = "backstop_old"/' "$old/Cargo.toml"
fi
export CARGO_TARGET_DIR=target/baseline/target
cargo build --release --quiet --manifest-path benches/baseline/Cargo.toml
bin=target/baseline/target/release/backstop-baseline
if [ "${BASELINE_MODE:-time}" = instructions ]; then
  # Per call: the difference of two runs' totals over the difference of their calls.
  per_call() {
    local a b
    a=$(INSTR_STACK=$1 INSTR_CALLS=1000 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" 2>&1 \
      | awk '/refs:/ {gsub(",", "", $NF); print $NF}')
    b=$(INSTR_STACK=$1 INSTR_CALLS=11000 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" 2>&1 \
      | awk '/refs:/ {gsub(",", "", $NF); print $NF}')
    echo $(( (b - a) / 10000 ))
  }
  bare=$(per_call bare)
  tower=$(( $(per_call tower_retry) - bare ))
  for stack in tower_retry backstop_retry backstop_retry_b8d51a5 floor_retry; do
    added=$(( $(per_call $stack) - bare ))
    echo "instructions stack=$stack added=$added ratio_to_tower_retry=$(awk "BEGIN {printf \"%.2f\", $added / $tower}")"
  done
  exit 0
fi
pin=()
command -v taskset >/dev/null && pin=(taskset -c 1)
RATIOS_PROCESSES=${RATIOS_PROCESSES:-25} "${pin[@]}" "$bin" | grep '^ratios'
