# A tagged `uid-range` derivation that does, as root of its own user namespace, what a NixOS
# GPU container test's build does before the test driver starts a container
# (lib.runGpuContainerTest, then the driver): keep /run aside (mkdir /cuda-sandbox-run, mount
# --rbind /run there), mount a tmpfs over /run as the test driver does, then render the
# container's binds from the kept /run (`cuda-sandbox-check container-binds --run-dir`). It
# records what it saw in $out/facts (one `key value` a line) and the binds in $out/binds.
# Built by runner/tests/container_binds/ (nix_versions tier).
{
  runner,
  nonce,
}:
derivation {
  name = "container-binds-uid-range";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  PATH = "/bin:/usr/bin:/sbin:/usr/sbin";
  runner = builtins.path {
    path = /. + runner;
    name = "cuda-sandbox-check";
  };
  inherit nonce;
  requiredSystemFeatures = [
    "cuda"
    "uid-range"
  ];
  args = [
    "-c"
    ''
      set -u
      mkdir "$out"
      {
        echo "uid $(id -u)"
        if [ -w /run ]; then echo "run writable"; else echo "run not-writable"; fi
        echo "sys $(sed -n 's|^[^ ]* /sys \([^ ]*\) .*|\1|p' /proc/self/mounts)"
        if mkdir -p /cuda-sandbox-run 2>/dev/null && mount --rbind /run /cuda-sandbox-run 2>/dev/null; then
          echo "rbind ok"
        else
          echo "rbind failed"
        fi
        if mount -t tmpfs none /run 2>/dev/null; then echo "tmpfs ok"; else echo "tmpfs failed"; fi
        if [ -e /run/cuda-sandbox/manifest.json ]; then echo "manifest-in-run visible"; else echo "manifest-in-run hidden"; fi
      } > "$out/facts"
      if "$runner" container-binds --run-dir /cuda-sandbox-run > "$out/binds" 2> "$out/binds-error"; then
        echo "container-binds ok" >> "$out/facts"
      else
        echo "container-binds failed" >> "$out/facts"
      fi
      sed -e 's/^--bind[-ro]*=//' -e 's/:.*//' "$out/binds" | while read -r source; do
        stat -L -c '%F %n' "$source"
      done > "$out/sources"
    ''
  ];
}
