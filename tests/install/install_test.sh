#!/usr/bin/env bash
# ddpkit as an installed library, as its users get it (docs/library.md):
#   tests/install/install_test.sh BUILD_DIR "API;HEADERS"
# checks that docs/library.md's table of API headers is the list the CMake files install (the
# second argument, ddpkit_api_headers'), installs BUILD_DIR to a temporary prefix, then from
# that prefix alone
#   1. compiles all installed headers, with nothing but the prefix on the include path: the
#      installed set is closed, and the binary's own code (tools/) stays out;
#   2. builds tests/install/join_regression/ with find_package(ddpkit) and runs its tests;
#   3. builds and runs pkg_config_smoke.cc with `pkg-config --cflags --libs ddpkit`.
# A ctest test of the plain build (tests/CMakeLists.txt); about a minute on two cores.
set -euo pipefail
build="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

echo "== 0. docs/library.md lists the API headers the CMake files install"
documented="$(grep -oE '^\| `(autograd|comm|join|reducer)/[^`]+\.h`' "$here/../../docs/library.md" |
  tr -d '|` ' | sort)"
installed="$(tr ';' '\n' <<<"$2" | sort)"
if [ "$documented" != "$installed" ]; then
  echo "FAIL: docs/library.md's API headers differ from ddpkit_api_headers in the CMake files:" >&2
  diff <(echo "$documented") <(echo "$installed") | sed 's/^</  only in the docs:/; s/^>/  only in CMake:/' |
    grep only >&2
  exit 1
fi
echo "$(wc -l <<<"$installed") API headers"

cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
read -r -a cflags <<<"$(pkg-config --cflags ddpkit)"
read -r -a libs <<<"$(pkg-config --libs ddpkit)"

echo "== 1. the installed headers, all in one file, compile from the prefix alone"
if [ -e "$prefix/include/tools" ] || [ -e "$prefix/include/tests" ]; then
  echo "FAIL: the binary's own code (tools/ or tests/) was installed" >&2
  exit 1
fi
(cd "$prefix/include" && find . -name '*.h' | sed 's|^\./\(.*\)|#include "\1"|' | sort) \
  >"$work/all_headers.cc"
c++ "${cflags[@]}" -fsyntax-only "$work/all_headers.cc" ||
  { echo "FAIL: an installed header includes one that was not installed" >&2; exit 1; }
echo "$(wc -l <"$work/all_headers.cc") headers"

echo "== 2. find_package(ddpkit): tests/install/join_regression"
cmake -S "$here/join_regression" -B "$work/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/example"
"$work/example/join_regression_test"

echo "== 3. pkg-config --cflags --libs ddpkit"
c++ -O1 "${cflags[@]}" "$here/pkg_config_smoke.cc" -o "$work/smoke" "${libs[@]}"
"$work/smoke"
