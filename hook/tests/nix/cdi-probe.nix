# A tagged derivation that reports what a CDI rule gave it: the spec's device nodes, the
# libraries the hook relocated to the driver link, what it left out, and the manifest. Used by
# hook/tests/cdi/. `readPaths` are files the probe tries to read (closure members, passed
# without string context, so Nix does not add them to the sandbox by itself).
{
  nonce,
  readPaths ? "",
}:
let
  report = import ./report.nix;
in
derivation {
  name = "cdi-probe";
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
        for d in /dev/card1 /dev/card2 /dev/vendorctl; do
          if [ -c "$d" ]; then echo "char $d $(stat -c '%Hr:%Lr' "$d")"
          else echo "absent $d"; fi
        done
        for f in /run/opengl-driver/lib/libVendor.so.0 /run/opengl-driver/lib/libcuda.so.1 /bin/vendorBin; do
          if [ -f "$f" ]; then echo "file $f $(head -c 16 "$f" | tr -c '[:alnum:] ' '.')"
          else echo "absent $f"; fi
        done
        ${report.manifest}
        ${report.readPaths}
      } > "$out"
    ''
  ];
}
