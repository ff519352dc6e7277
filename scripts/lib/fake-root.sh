# Shared by scripts/main and nix-tests/sandbox-builds (sourced, not run): the hook's config
# written from the default rule, the FAKE host (device nodes and driver), and the NIX_CONFIG of
# a sandboxed build with the freshly built hook as pre-build-hook.

# The one default rule (the hook embeds it, the NixOS module imports it).
default_rule_toml=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/hook/default-config.toml

# write_config OUT TOP_LEVEL [DRIVER_KEYS]: the default rule with TOP_LEVEL (host-specific
# top-level keys, as TOML) set at the top level and DRIVER_KEYS (TOML) in its `[rule.driver]`,
# merged as parsed data, not as text (scripts/lib/write-config.py).
write_config() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/write-config.py" "$default_rule_toml" "$1" "$2" "${3:-}"
}

# make_fake_root ROOT BIN: real character devices of a discrete GPU, the kernel module's
# version file and the FAKE driver (fixtures/, built by cargo into BIN) at the driver link.
# Needs root (mknod).
make_fake_root() {
  local root=$1 bin=$2
  mkdir -p "$root/dev" "$root/proc/driver/nvidia" "$root/run/opengl-driver"
  mknod -m 666 "$root/dev/nvidia0" c 195 0
  mknod -m 666 "$root/dev/nvidiactl" c 195 255
  mknod -m 666 "$root/dev/nvidia-uvm" c 235 0
  echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE, cuda-sandbox fixtures)" \
    >"$root/proc/driver/nvidia/version"
  "$bin/make-fake-driver" "$root/run/opengl-driver/lib" --cuda-version 12.2 \
    --kernel-driver 535.104.05 >/dev/null
}

# use_hook BIN CONFIG: Nix builds from here on run sandboxed, substitute nothing, have the GPU
# features and call BIN's hook, which reads CONFIG.
use_hook() {
  local bin=$1 sandbox_paths="" p
  for p in /lib /lib64; do [ -e "$p" ] && sandbox_paths="$sandbox_paths $p"; done
  export CUDA_SANDBOX_CONFIG=$2
  export NIX_CONFIG="sandbox = true
sandbox-fallback = false
substituters =
pre-build-hook = $bin/cuda-sandbox-hook
system-features = cuda gpu nvidia-gpu opengl
sandbox-paths =$sandbox_paths"
}
