#!/usr/bin/env bash
# Installs everything uct-roce needs on Debian 12 and fetches the UCX internal headers
# (uct/base/*.h) from Debian's source package of the *installed* libucx version.
# Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deps="${ROCE_DEPS_DIR:-$here/.deps}"

packages=(
  build-essential cmake pkg-config git dpkg-dev xz-utils
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libucx-dev ucx-utils libucx0
  openmpi-bin libopenmpi-dev netpipe-openmpi
  libibverbs-dev rdma-core ibverbs-providers ibverbs-utils
  libpcap-dev tshark iproute2 python3 nftables
  librdmacm-dev lammps hpcc python3-matplotlib libhwloc-dev
  clang libclang-rt-14-dev valgrind
)

need=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "[setup] installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # tshark asks whether non-root users may capture: answer no, non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

ucx_ver=$(dpkg-query -W -f='${Version}' libucx-dev)     # e.g. 1.13.1-1
ucx_upstream=${ucx_ver%-*}
src="$deps/ucx-$ucx_ver"
if [ ! -f "$src/src/uct/base/uct_iface.h" ]; then
  echo "[setup] fetching UCX $ucx_ver source headers from Debian's source package"
  # Source packages need deb-src entries for the same suites as the binary ones.
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    if grep -q '^Types: deb$' "$f"; then
      sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
      changed=1
    fi
  done
  if [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list \
     && ! grep -q '^deb-src ' /etc/apt/sources.list; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > /etc/apt/sources.list.d/roce-deb-src.list
    changed=1
  fi
  [ -z "${changed:-}" ] || apt-get update -q
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get source -q --download-only "ucx=$ucx_ver" >/dev/null 2>&1 \
     && dpkg-source -x ./ucx_*.dsc ucx >/dev/null) || {
    echo "[setup] ERROR: could not obtain Debian's source package ucx=$ucx_ver" >&2; exit 1; }
  mkdir -p "$deps"
  rm -rf "$src"
  mv "$tmp/ucx" "$src"
  rm -rf "$tmp"
fi
echo "[setup] UCX $ucx_upstream headers: $src"
# The rxe guest suite (QEMU + Debian kernel with rdma_rxe); ROCE_RXE=0 skips it.
[ "${ROCE_RXE:-1}" = 0 ] || bash "$here/cmake/rxe-guest/setup-deps.sh"
echo "[setup] ok"
