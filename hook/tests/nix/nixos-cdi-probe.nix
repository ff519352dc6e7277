# A tagged derivation that reports what the NixOS module's CDI rule gave it: the nodes (GPUs
# and their DRM nodes) of the spec `hardware.nvidia-container-toolkit` generates, the driver
# library the hook relocated to the driver link, the FHS program it left out, and the
# manifest. Used by hook/tests/cdi/.
# `readPaths` are files the probe tries to read (closure members, passed without string
# context, so Nix does not add them to the sandbox by itself).
{
  nonce,
  readPaths ? "",
}:
let
  report = import ./report.nix;
in
derivation {
  name = "nixos-cdi-probe";
  inherit nonce;
  system = builtins.currentSystem;
  builder = "/bin/bash";
  PATH = "/bin:/usr/bin";
  READ_PATHS = builtins.unsafeDiscardStringContext readPaths;
  requiredSystemFeatures = [ "cuda" ];
  args = [
    "-c"
    ''
      set -u
      {
        for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-modeset /dev/nvidia-uvm \
          /dev/dri/card1 /dev/dri/card2 /dev/dri/renderD128 /dev/dri/renderD129; do
          if [ -c "$d" ]; then echo "char $d $(stat -c '%Hr:%Lr' "$d")"
          else echo "absent $d"; fi
        done
        for f in /run/opengl-driver/lib/libcuda.so.1 /usr/bin/nvidia-smi; do
          if [ -f "$f" ]; then echo "file $f $(head -c 16 "$f" | tr -c '[:alnum:] ' '.')"
          else echo "absent $f"; fi
        done
        ${report.manifest}
        ${report.readPaths}
      } > "$out"
    ''
  ];
}
