#!/usr/bin/env bash
# Packs ddpkit's binaries and the shared libraries they need into one relocatable folder, for a
# Linux x86-64 machine without ddpkit's Debian packages (a GPU node, a cluster node):
#
#   tools/bundle.sh [--out DIR] [--tar] [--with-cuda-libs] [BINARY...]
#
#   BINARY...         what to pack (default: every file in build/bin)
#   --out DIR         where (default: build/bundle): DIR/bin holds a launcher script per binary
#                     (it puts DIR/lib first on the loader's path for that program alone, so
#                     the target's other programs, Python among them, keep their own
#                     libraries), DIR/libexec the stripped binaries, DIR/lib the libraries
#   --tar             also write DIR.tar.gz
#   --with-cuda-libs  pack cuBLAS, cuDNN, cudart and NCCL too (over 800 MB); by default the target's
#                     own CUDA 13 libraries are used (CUDA_HOME/lib64, or those of its PyTorch)
#
# On the target:  source DIR/env.sh && ddpkit train --device cuda   (or run DIR/bin/ddpkit)
# glibc and the GPU driver (libcuda) always come from the target; it needs glibc >= this
# machine's (ldd --version).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build/bundle"
tar=0
with_cuda=0
binaries=()
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --tar) tar=1; shift ;;
    --with-cuda-libs) with_cuda=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "bundle.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) binaries+=("$1"); shift ;;
  esac
done
if ((${#binaries[@]} == 0)); then
  [ -d "$root/build/bin" ] || { echo "bundle.sh: no build/bin; run tools/scripts/build.sh" >&2; exit 1; }
  mapfile -t binaries < <(find "$root/build/bin" -maxdepth 1 -type f -perm -u+x | sort)
fi

# Libraries the target provides itself: glibc's, and the GPU driver's.
is_system() {
  case "$(basename "$1")" in
    ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libcuda.so*) return 0 ;;
  esac
  return 1
}
is_cuda_toolkit() {
  case "$(basename "$1")" in
    libcublas*|libcublasLt*|libcudart*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/libexec" "$out/lib"
declare -A packed=()
skipped_cuda=()
for bin in "${binaries[@]}"; do
  [ -f "$bin" ] || { echo "bundle.sh: no such binary: $bin" >&2; exit 1; }
  name="$(basename "$bin")"
  strip --strip-debug -o "$out/libexec/$name" "$bin"
  cat >"$out/bin/$name" <<WRAP
#!/bin/sh
# $name from a ddpkit bundle: its libraries first, then the CUDA libraries env.sh found.
here="\$(cd "\$(dirname "\$0")/.." && pwd)"
LD_LIBRARY_PATH="\$here/lib:\${DDPKIT_BUNDLE_CUDA_LIBS:-\${CUDA_HOME:-/usr/local/cuda}/lib64}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "\$here/libexec/$name" "\$@"
WRAP
  chmod +x "$out/bin/$name"
  while read -r lib; do
    [ -n "$lib" ] && [ -z "${packed[$lib]:-}" ] || continue
    packed[$lib]=1
    if is_system "$lib"; then continue; fi
    if is_cuda_toolkit "$lib" && ((with_cuda == 0)); then
      skipped_cuda+=("$(basename "$lib")")
      continue
    fi
    cp -L "$lib" "$out/lib/$(basename "$lib")"
  done < <(ldd "$bin" | awk '/=> \// { print $3 }')
done

cat >"$out/env.sh" <<'ENV'
# Source this on the target: the bundle's programs on PATH, and where the target's own CUDA
# libraries are (CUDA_HOME/lib64, then the nvidia-* pip packages PyTorch brings) for them.
bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cuda_libs="${CUDA_HOME:-/usr/local/cuda}/lib64"
for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && cuda_libs="$cuda_libs:$d"; done
done
export DDPKIT_BUNDLE_CUDA_LIBS="$cuda_libs"
export PATH="$bundle/bin:$PATH"
ENV

echo "bundle: $out ($(du -sh "$out" | cut -f1)): ${#binaries[@]} binaries, $(ls "$out/lib" | wc -l) libraries"
if ((${#skipped_cuda[@]})); then
  echo "bundle: left for the target to provide: $(printf '%s\n' "${skipped_cuda[@]}" | sort -u | tr '\n' ' ')"
fi
if ((tar)); then
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
  echo "bundle: $out.tar.gz ($(du -sh "$out.tar.gz" | cut -f1))"
fi
