# Sourced by the GPU bundle scripts (tools/gpu/make_gpu_bundle.sh, benchmarks/gpu/bundle_bench.sh):
# shared-library collection and the checks that a bundle will start and travel.
#
# The device tool carries the working tree and the carried bundle together, 64 MiB at most, and
# the GPU machine's image may have an older glibc than this Debian 12 machine: a bundle that
# breaks either limit fails on the GPU machine, after minutes of device time, so both are checked
# here, before it goes.

# Largest glibc a bundle may require (symbol versions GLIBC_x.y): the GPU image may be as old as
# Ubuntu 22.04. Override with BLOSSOM_MAX_GLIBC.
BLOSSOM_MAX_GLIBC_DEFAULT=2.35
# The device tool's limit on the working tree plus carried paths, in bytes.
BLOSSOM_TRAVEL_LIMIT_BYTES=$(( 64 * 1048576 ))

# Adds the shared libraries `$1` loads to the associative array LIBS (name -> path, or NOT_FOUND).
collect_libs() {
  local lib path
  while read -r lib path; do
    LIBS["$lib"]="$path"
  done < <(ldd "$1" | awk '/=>/ && $3 ~ /^\// {print $1, $3} /not found/ {print $1, "NOT_FOUND"}')
}

# Copies the libraries in LIBS into $BUNDLE/lib. The C runtime stays the device's;
# libstdc++/libgcc_s go to lib/compat (used only if the device's are older); libraries over
# MAX_LIB_MB MiB (cuBLAS, NCCL) are left to the device and listed in LEFT_TO_DEVICE. Exits on a
# library ldd could not find.
bundle_shared_libs() {
  local system_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libutil\.so|libresolv\.so)'
  local compat_re='^(libstdc\+\+\.so|libgcc_s\.so)'
  local lib path size_mb
  mkdir -p "$BUNDLE/lib/compat"
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

# Prints the highest GLIBC_x.y symbol version any ELF file under the given folders needs. lib/compat
# is left out: its libstdc++ is loaded only where the device's is older, and cannot help on a
# machine whose glibc is older than this one's anyway.
highest_glibc_needed() {
  local f
  find "$@" -type f -not -path '*/compat/*' 2>/dev/null | while read -r f; do
    [[ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
    objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' || true  # none in this file
  done | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -1
}

# Fails (exit 1) when the bundle's binaries or libraries need a newer glibc than
# ${BLOSSOM_MAX_GLIBC:-2.35}; prints the version needed. Sets GLIBC_NEEDED.
check_bundle_glibc() {
  local max="${BLOSSOM_MAX_GLIBC:-$BLOSSOM_MAX_GLIBC_DEFAULT}"
  GLIBC_NEEDED="$(highest_glibc_needed "$BUNDLE/bin" "$BUNDLE/lib")"
  echo "   glibc needed: ${GLIBC_NEEDED:-none} (allowed: $max)"
  if [[ -n "$GLIBC_NEEDED" && "$(printf '%s\n%s\n' "$GLIBC_NEEDED" "$max" | sort -t. -k1,1n -k2,2n | tail -1)" != "$max" ]]; then
    echo "ERROR: the bundle needs glibc $GLIBC_NEEDED but the GPU machine may have only $max;" \
         "the files needing it:" >&2
    find "$BUNDLE/bin" "$BUNDLE/lib" -type f -not -path '*/compat/*' | while read -r f; do
      if objdump -T "$f" 2>/dev/null | grep -q "GLIBC_$GLIBC_NEEDED"; then echo "  ${f#"$BUNDLE"/}" >&2; fi
    done
    return 1
  fi
}

# Fails (exit 1) when the working tree that travels with every device call (tracked files and
# untracked ones git does not ignore) plus the bundle exceeds the device tool's 64 MiB, unless a
# PACK path is given and an xz archive of the bundle written there fits instead. Run from the
# repository root; outside a git checkout only the bundle counts. Sets TRAVEL_BYTES, and PACKED_TO
# when the archive is what travels.
check_travel_size() {  # [PACK: an .txz to make and check when the bundle is too big to carry]
  local tree_bytes=0 bundle_bytes
  PACKED_TO=""
  if git rev-parse --show-toplevel >/dev/null 2>&1; then
    tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -L -c %s 2>/dev/null |
                 awk '{s += $1} END {print s + 0}')
  fi
  bundle_bytes=$(du -sbL "$BUNDLE" | cut -f1)
  TRAVEL_BYTES=$(( tree_bytes + bundle_bytes ))
  echo "   travels: $(( TRAVEL_BYTES / 1048576 )) MiB = working tree $(( tree_bytes / 1048576 )) MiB" \
       "+ bundle $(( bundle_bytes / 1048576 )) MiB (limit 64 MiB)"
  if (( TRAVEL_BYTES <= BLOSSOM_TRAVEL_LIMIT_BYTES )); then return 0; fi
  local pack="${1:-}"
  if [[ -n "$pack" ]]; then
    # Too big to carry as it is: an xz archive of it travels instead (a bundle is mostly
    # binaries and libraries, which pack to about a fifth), unpacked first on the machine.
    mkdir -p "$(dirname "$pack")"
    tar cf - -C "$(dirname "$BUNDLE")" "$(basename "$BUNDLE")" | xz -T0 -6 > "$pack"
    local pack_bytes
    pack_bytes=$(stat -c %s "$pack")
    TRAVEL_BYTES=$(( tree_bytes + pack_bytes ))
    echo "   packed: $pack, $(( pack_bytes / 1048576 )) MiB; travels: $(( TRAVEL_BYTES / 1048576 )) MiB with the tree"
    if (( TRAVEL_BYTES <= BLOSSOM_TRAVEL_LIMIT_BYTES )); then
      PACKED_TO="$pack"
      echo "   carry its folder, not the bundle, and unpack it first there:" \
           "python3 -c \"import tarfile; tarfile.open('${pack#"$(git rev-parse --show-toplevel 2>/dev/null)"/}').extractall('$(basename "$(dirname "$BUNDLE")")')\""
      return 0
    fi
  fi
  echo "ERROR: the working tree and the bundle together exceed the device tool's 64 MiB;" \
       "lower BLOSSOM_MAX_LIB_MB or leave untracked files out of the tree" >&2
  return 1
}
