# Sourced by tools/gpu/run_gpu_suite.sh and benchmarks/gpu/bundle_bench.sh: copies the shared
# libraries collected in the associative array LIBS (name -> path, or NOT_FOUND) into
# $BUNDLE/lib. The C runtime stays the device's; libstdc++/libgcc_s go to lib/compat (used only
# if the device's are older); libraries over MAX_LIB_MB MiB (cuBLAS, NCCL) are left to the
# device and listed in LEFT_TO_DEVICE. Exits on a library ldd could not find.
bundle_shared_libs() {
  local system_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libutil\.so|libresolv\.so)'
  local compat_re='^(libstdc\+\+\.so|libgcc_s\.so)'
  local lib path size_mb
  for lib in $(printf '%s\n' "${!LIBS[@]}" | sort); do
    path="${LIBS[$lib]}"
    if [[ "$path" == NOT_FOUND ]]; then echo "ldd: $lib not found on this machine" >&2; exit 1; fi
    if [[ "$lib" =~ $system_re ]]; then continue; fi
    if [[ "$lib" =~ $compat_re ]]; then cp -L "$path" "$BUNDLE/lib/compat/$lib"; continue; fi
    size_mb=$(( $(stat -L -c %s "$path") / 1048576 ))
    if (( size_mb > MAX_LIB_MB )); then
      LEFT_TO_DEVICE+=("$lib")
      continue
    fi
    cp -L "$path" "$BUNDLE/lib/$lib"
  done
  chmod -R u+w "$BUNDLE/lib"
}
