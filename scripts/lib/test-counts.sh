# shellcheck shell=bash
# Shared by scripts/lib/test-tiers.sh and its users (sourced, not run): proof that a cargo test
# run ran every test it was given, by count, without naming any test. Under CI=true a test
# whose prerequisite is missing fails rather than skips (testkit); this catches the rest: a
# test ignored, filtered out, or a test binary that never reported. (A test that returns early
# still passes, and what it prints is captured: the count cannot see that, testkit's panic can.)

# listed_tests [CARGO_TEST_ARG...] [-- LIBTEST_ARG...]: how many tests `cargo test --workspace`
# would run with these arguments: the same target options and filters as the run (a filter such
# as `sandbox::` or `--skip NAME` lowers the count). Lists only; builds what is missing.
listed_tests() {
  local -a cargo_args=() libtest_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    cargo_args+=("$1")
    shift
  done
  [ $# -eq 0 ] || shift
  libtest_args=("$@")
  local list
  list=$(cargo test --workspace --locked --quiet "${cargo_args[@]}" -- --list "${libtest_args[@]}" 2>/dev/null) ||
    { echo "cargo test -- --list failed" >&2; return 1; }
  grep -c ': test$' <<<"$list" || true
}

# check_test_log LOG LISTED WHAT: LOG holds a cargo test run's output. Every test binary's
# `test result:` line is summed; the run must have passed exactly LISTED tests, with none
# failed or ignored. WHAT names the run in messages.
check_test_log() {
  local log=$1 listed=$2 what=$3 sums
  sums=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored; [0-9]* measured; \([0-9]*\) filtered out.*/\1 \2 \3 \4/p' "$log" |
    awk '{ p += $1; f += $2; i += $3; x += $4; n += 1 } END { printf "%d %d %d %d %d\n", n, p, f, i, x }')
  local binaries passed failed ignored filtered
  read -r binaries passed failed ignored filtered <<<"$sums"
  local problems=()
  [ "$binaries" -gt 0 ] || problems+=("no test binary reported a result")
  [ "$failed" -eq 0 ] || problems+=("$failed failed")
  [ "$ignored" -eq 0 ] || problems+=("$ignored ignored")
  [ "$passed" -eq "$listed" ] || problems+=("$passed passed of $listed listed")
  if [ ${#problems[@]} -gt 0 ]; then
    local joined
    joined=$(printf '%s; ' "${problems[@]}")
    printf '%s: not every test ran and passed: %s\n' "$what" "${joined%; }" >&2
    return 1
  fi
  printf '%s: %d of %d listed tests passed in %d test binaries (%d filtered out), none failed or ignored\n' \
    "$what" "$passed" "$listed" "$binaries" "$filtered" >&2
}
