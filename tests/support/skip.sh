# Sourced by the test scripts: what a test does when something it needs is
# missing. skip_missing REASON...:
#   - elsewhere: prints "SKIP: REASON" and exits 0; CTest counts the test
#     as skipped (SKIP_REGULAR_EXPRESSION "SKIP:"), and scripts/test lists
#     it, with REASON, at its end;
#   - on CI (the environment variable CI set and not empty): prints
#     "FAIL: REASON ..." and exits 1, so that CI never passes without the
#     test having run (scripts/setup installs every test dependency).
# Only for what scripts/setup provides or CI has (packages, Python modules,
# root); a test that cannot run by design where there is no GPU says SKIP
# by itself.
skip_missing() {
  if [ -n "${CI:-}" ]; then
    echo "FAIL: $* (CI is set: a missing test dependency is a failure, not a skip)"
    exit 1
  fi
  echo "SKIP: $*"
  exit 0
}
