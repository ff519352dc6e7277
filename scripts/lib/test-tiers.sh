# shellcheck shell=bash
# Shared by scripts/test, scripts/test-nix-versions and .ci/run (sourced, after
# scripts/lib/test-counts.sh): the test tiers (docs/testing.md) and how to run one, once, with
# no retry, timed and counted.
#
# An integration test's name starts with its tier (hook/tests/NAME/TIER.rs holds the tests,
# NAME/main.rs their helpers), so `cargo test --workspace --test '*' -- TIER::` selects one
# tier. pure also holds every crate's unit tests (--lib, --bins) and the doctests.

# The tiers, cheapest first.
TEST_TIERS=(pure cli root sandbox nix_versions)

# tier_selections TIER: the `cargo test` selections that make up TIER, one a line:
# cargo's target options, then `--` and the name filter when there is one.
tier_selections() {
  case $1 in
    pure) printf '%s\n' "--lib --bins" "--doc" "--test * -- pure::" ;;
    cli | root | sandbox | nix_versions) printf '%s\n' "--test * -- $1::" ;;
    *)
      echo "unknown test tier: $1 (one of ${TEST_TIERS[*]})" >&2
      return 2
      ;;
  esac
}

# check_every_test_has_a_tier: fails, naming them, when an integration test's name does not
# start with a tier (a test written in NAME/main.rs rather than NAME/TIER.rs): no tier's
# filter would select it, so no run would ever run it. Lists only; builds what is missing.
check_every_test_has_a_tier() {
  local list untiered pattern
  list=$(cargo test --workspace --locked --quiet --test '*' -- --list 2>/dev/null) ||
    { echo "cargo test --test '*' -- --list failed" >&2; return 1; }
  pattern="^($(IFS='|'; echo "${TEST_TIERS[*]}"))::"
  untiered=$(grep ': test$' <<<"$list" | grep -Ev "$pattern" || true)
  if [ -n "$untiered" ]; then
    printf 'integration tests outside every tier (move each into NAME/TIER.rs, docs/testing.md):\n%s\n' \
      "$untiered" >&2
    return 1
  fi
}

# run_tier WHAT TIER [WRAPPER...]: runs TIER's tests once, each selection as
# `WRAPPER cargo test --workspace --locked --no-fail-fast SELECTION` (WRAPPER: e.g.
# scripts/gpu-shaped, or `env CARGO_TARGET_..._RUNNER=...`); then checks by count that every
# test the same selections list (on the host) ran and passed, and prints the tier's wall time.
# With TIER_TIMES set, appends "WHAT<TAB>TIER<TAB>SECONDS<TAB>TESTS" to that file. WHAT names
# the run in messages. Returns non-zero when a test failed or the count is off.
run_tier() {
  local what=$1 tier=$2
  shift 2
  local -a selections args
  mapfile -t selections < <(tier_selections "$tier") || return 2
  [ ${#selections[@]} -gt 0 ] || return 2
  local log selection n listed=0 status=0 start=$SECONDS
  log=$(mktemp)
  for selection in "${selections[@]}"; do
    # `read -a` splits on spaces and never expands `*`: cargo gets the pattern.
    read -ra args <<<"$selection"
    printf '\n== %s, tier %s: cargo test %s\n' "$what" "$tier" "$selection" >&2
    "$@" cargo test --workspace --locked --no-fail-fast "${args[@]}" 2>&1 |
      tee -a "$log" || status=1
    n=$(listed_tests "${args[@]}") || { rm -f "$log"; return 1; }
    listed=$((listed + n))
  done
  local seconds=$((SECONDS - start))
  check_test_log "$log" "$listed" "$what, tier $tier" || status=1
  rm -f "$log"
  printf '%s, tier %s: %d s\n' "$what" "$tier" "$seconds" >&2
  if [ -n "${TIER_TIMES:-}" ]; then
    printf '%s\t%s\t%d\t%d\n' "$what" "$tier" "$seconds" "$listed" >>"$TIER_TIMES"
  fi
  return "$status"
}

# open_nix_store WHAT [WRAPPER...]: opens the Nix store once (`WRAPPER nix-store --init`),
# before a tier's tests run many Nix processes at once. Nix makes a store's database on first
# use, and that is racy: six concurrent `nix-store --init` on a fresh store failed in 9 of 80
# rounds under 2.34 ("schema" is corrupt) and 4 of 80 under 2.8 (a gcroots symlink exists), and
# in 0 of 80 each when one ran first. CI saw it as "SQLite database ... is busy" when a fresh
# 2.34 root's first tier started five builds at once. Opening an existing store changes nothing.
open_nix_store() {
  local what=$1
  shift
  "$@" nix-store --init || { echo "$what: nix-store --init failed" >&2; return 1; }
}

# print_tier_times FILE: the table of run_tier's times in FILE, one row a run of a tier.
print_tier_times() {
  printf '\n%-28s %-13s %7s %6s\n' "run" "tier" "seconds" "tests" >&2
  local what tier seconds tests total=0
  while IFS=$'\t' read -r what tier seconds tests; do
    printf '%-28s %-13s %7d %6d\n' "$what" "$tier" "$seconds" "$tests" >&2
    total=$((total + seconds))
  done <"$1"
  printf '%-28s %-13s %7d\n' "all tiers" "" "$total" >&2
}
