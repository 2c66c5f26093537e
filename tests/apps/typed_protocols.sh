#!/usr/bin/env bash
# The actors' typed interfaces reject what their message tables lack, when
# it compiles (docs/architecture.md, "Messages"): compiles
# tests/compile/typed_protocols.cpp once per case, with the project's
# include paths. Case 0 must compile; cases 1-6 must fail, each with CAF's
# own diagnosis of a message the receiver does not accept (so a case that
# fails for another reason, a typo or a missing header, fails the test).
#   typed_protocols.sh CXX SOURCE_DIR BUILD_DIR
set -u
cxx=$1 src=$2 build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compile() {
  "$cxx" -std=c++20 -fsyntax-only -I"$build/include" -DCASE="$1" \
    "$src/tests/compile/typed_protocols.cpp" > "$work/$1.log" 2>&1
}
if ! compile 0; then
  echo "FAIL: case 0 (messages of the tables) does not compile:"
  head -30 "$work/0.log"
  exit 1
fi
echo "ok: case 0 compiles"
status=0
for c in 1 2 3 4 5 6; do
  if compile "$c"; then
    echo "FAIL: case $c (a message no table has) compiles"
    status=1
  elif ! grep -q "receiver does not accept given message" "$work/$c.log"; then
    echo "FAIL: case $c fails for another reason:"
    grep -m5 "error" "$work/$c.log"
    status=1
  else
    echo "ok: case $c is refused: receiver does not accept given message"
  fi
done
exit $status
